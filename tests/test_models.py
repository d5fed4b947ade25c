"""Every registered model builds and runs one training step (generated: one test per model).

The step uses the model's own Train() input and task with the batch size cut to the smallest one its
pipelines accept (at least 2), so this stays fast for big models too.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lingpipe.distributed import cluster
from lingpipe.model import model_registry
import pipeline_test_util as util

# Stepped in the full tier only: over 3 s a step on a 2-core machine (AmoebaNet-D about a minute).
_FULL_TIER_ONLY = ('image.cifar10.AmoebaNetD', 'image.cifar10.ResNet', 'mt.multilingual.TransformerGPipe',
                   'synthetic.LongSequenceTransformer', 'synthetic.TransformerStackGPipe')


def _Cases():
  """One case per model; a model class may set ONE_STEP_TEST = 'slow' (marked slow) or 'skip' (too big to step on
  a CI machine; its size is checked without building it, e.g. in test_amoebanet.py; ONE_STEP_SKIP_REASON says
  why if it is not size)."""
  cases = []
  for name, cls in sorted(model_registry.GetAllRegisteredModels().items()):
    kind = getattr(cls, 'ONE_STEP_TEST', 'fast')
    if kind == 'fast' and name in _FULL_TIER_ONLY:
      kind = 'slow'
    marks = {'slow': [pytest.mark.slow],
             'skip': [pytest.mark.skip(reason=getattr(cls, 'ONE_STEP_SKIP_REASON', None) or
                                       '%s is too big for one step on a CI machine' % name)]}.get(kind, [])
    cases.append(pytest.param(name, marks=marks, id=name))
  return cases


@pytest.mark.parametrize('name', _Cases())
def test_model_builds_and_trains_one_step(name):
  _TrainOneStep(model_registry.GetParams(name, 'Train'))


def _Bfloat16Cases():
  """The models stepped above, but the slowest (AmoebaNetD in bfloat16: test_amoebanet.py; KerasResNet50)."""
  return [name for name, cls in sorted(model_registry.GetAllRegisteredModels().items())
          if getattr(cls, 'ONE_STEP_TEST', 'fast') == 'fast' and name != 'image.cifar10.AmoebaNetD']


@pytest.mark.parametrize('name', _Bfloat16Cases())
@pytest.mark.slow
def test_model_trains_one_step_in_bfloat16_by_override(name):
  """--model_params_override="task.fprop_dtype='bfloat16'" works for every registered model: its layers compute
  in bfloat16 on float32 master weights."""
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  p = run_params.BuildModelParams(name, override="task.fprop_dtype='bfloat16'")
  assert p.task.fprop_dtype == tf.bfloat16
  task = _TrainOneStep(p)
  assert all(v.dtype == tf.float32 for v in task.variables)
  assert {layer.fprop_dtype for layer in task.Walk()} == {tf.bfloat16}
  # A Keras model's layers are built under Keras's mixed_bfloat16 policy.
  keras_layers = [leaf for layer in task.Walk() if hasattr(layer, 'keras_layer')
                  for leaf in layer.keras_layer._flatten_layers()]  # pylint: disable=protected-access
  assert all(leaf.compute_dtype == 'bfloat16' for leaf in keras_layers if leaf.weights and not isinstance(
      leaf, keras.Model)), [(leaf.name, leaf.compute_dtype) for leaf in keras_layers]


def _TrainOneStep(p):
  """Builds the task of model params `p` and runs one training step on its own input; returns the task."""
  p.input.batch_size = min(p.input.batch_size, max([2] + [q.num_micro_batches for q in cluster.PipelineParams(p.task)]))
  p.input.shuffle_buffer_size = 16
  task = p.task.Instantiate()
  opt = task.CreateOptimizer()
  schedule = task.CreateLearningRateSchedule()
  batch = next(iter(p.input.Instantiate().GetDataset()))
  before = [v.numpy().copy() for v in task.trainable_variables]
  out = tf.function(autograph=False, func=lambda b: task.TrainStep(b, tf.constant(0, tf.int64), opt, schedule))(batch)
  assert bool(out.is_finite) and np.isfinite(float(out.loss))
  # Every weight matrix or filter moves. (Batch-norm scales of a deep net can get updates below float32
  # resolution in one warm-up step, so vectors are not required to.)
  unchanged = [v.name for b, v in zip(before, task.trainable_variables)
               if v.shape.rank >= 2 and np.array_equal(b, v.numpy())]
  assert not unchanged, unchanged
  return task


def test_every_pipelined_model_names_its_pipeline_task_network():
  """One override shape works for every registered model: --model_params_override="task.network.<field>=..."."""
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  pipelined = util.PipelinedModels()
  for name in pipelined:
    p = run_params.BuildModelParams(name, override='task.network.num_micro_batches=3;task.network.remat=never')
    assert (p.task.network.num_micro_batches, p.task.network.remat) == (3, 'never'), name
  assert {'image.cifar10.AmoebaNetD', 'mt.multilingual.TransformerGPipe', 'synthetic.DeepMlpGPipe'} <= set(
      pipelined)
