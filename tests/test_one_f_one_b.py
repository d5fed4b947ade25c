"""Schedules with the loss inside the pipeline ('1f1b', 'interleaved_1f1b', 'zero_bubble'): transparent against
the plain model; their plans and memory. More on zero bubble's split backward in test_zero_bubble.py."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule
from lingpipe.layers import batch_norm
from lingpipe.layers import linear
import pipeline_test_util as util
import timeline_test_util as ttu


def _SquaredError(outputs, targets):
  """Mean over rows of the squared error, weighted by rows: per micro-batch it combines into the whole batch's."""
  x = outputs.x if isinstance(outputs, dict) else outputs
  rows = tf.cast(tf.shape(x)[0], x.dtype)
  loss = tf.reduce_sum(tf.square(x - targets)) / rows
  return loss, {'loss': (loss, rows), 'max': (tf.reduce_max(x), rows)}


def _LossAndGrads(layer, x, targets, with_loss):
  loss, metrics, grads, x_grads = util.LossStep(layer, x, targets, _SquaredError, with_loss, lambda x: [x], step=3)
  return loss, metrics['loss'][1], grads + x_grads


@pytest.mark.parametrize('k,m,remat,v', [
    (2, 4, 'always', 1), (2, 4, 'never', 1), (3, 5, 'except_last', 1), (4, 2, 'always', 1), (1, 3, 'never', 1),
    (2, 1, 'always', 1),
    (2, 4, 'always', 2), (2, 4, 'never', 3), (3, 5, 'except_last', 2), (2, 3, 'always', 2), (1, 2, 'never', 4),
    (4, 4, 'always', 1)])
def test_loss_in_pipeline_schedules_match_the_plain_model(k, m, remat, v):
  schedule_name = '1f1b' if v == 1 and k != 4 else 'interleaved_1f1b'
  plain, pipe = util.Pair(util.Tanh(12, dim=8), num_splits=k, num_micro_batches=m, remat=remat,
                          schedule=schedule_name, virtual_stages=v)
  assert pipe.num_cells == k * v and pipe.num_devices == k
  rng = np.random.RandomState(0)
  x = tf.constant(rng.normal(size=(m * 3, 8)), tf.float32)
  targets = tf.constant(rng.normal(size=(m * 3, 8)), tf.float32)
  util.AssertClose(_LossAndGrads(plain, x, targets, False), _LossAndGrads(pipe, x, targets, True))


@pytest.mark.parametrize('schedule_name,v', [('1f1b', 1), ('interleaved_1f1b', 2), ('zero_bubble', 1), ('gpipe', 1)])
def test_a_loss_that_reads_the_pipelines_own_variables_gets_both_gradients(schedule_name, v):
  """A weight penalty (or a softmax tied to an embedding in the first cell) reads a cell's variable in the loss:
  its gradient is the cell's plus the loss's (the loss's once replaced the cell's)."""
  plain, pipe = util.Pair(util.Tanh(4, dim=8), num_splits=2, num_micro_batches=4, schedule=schedule_name,
                          virtual_stages=v)
  rng = np.random.RandomState(2)
  x = tf.constant(rng.normal(size=(12, 8)), tf.float32)
  targets = tf.constant(rng.normal(size=(12, 8)), tf.float32)

  def Penalized(layer):
    def Loss(outputs, part):
      loss, metrics = _SquaredError(outputs, part)
      penalty = 0.1 * tf.add_n([tf.reduce_sum(tf.square(w)) for w in layer.trainable_variables])
      return loss + penalty, dict(metrics, loss=(loss + penalty, metrics['loss'][1]))
    return Loss

  @tf.function(autograph=False)  # zero_bubble finds the ops reading each weight in the graph.
  def Run(layer, with_loss):
    with tf.GradientTape() as tape:
      with context.Training(True), context.StepSeed(3):
        if with_loss:
          loss, _ = layer.FPropWithLoss(x, targets, Penalized(layer))
        else:
          loss, _ = Penalized(layer)(layer.FProp(x), targets)
    return loss, tape.gradient(loss, list(layer.trainable_variables))

  util.AssertClose(Run(plain, False), Run(pipe, True))


def test_gpipe_computes_the_loss_and_its_gradient_on_the_last_cells_device():
  """GPipe's FPropWithLoss runs the loss where the outputs are (step.LossOnDevice), not where the caller's
  step is placed: the same loss and gradients, and no op of the loss or of its gradient on another device."""
  plain, pipe = util.Pair(util.Tanh(4, dim=8), num_splits=2, num_micro_batches=4)
  rng = np.random.RandomState(4)
  x = tf.constant(rng.normal(size=(12, 8)), tf.float32)
  targets = tf.constant(rng.normal(size=(12, 8)), tf.float32)
  util.AssertClose(_LossAndGrads(plain, x, targets, False), _LossAndGrads(pipe, x, targets, True))

  @tf.function(autograph=False)
  def Run(x):
    with tf.device(pipe.ReplicaDevices(0)[0]):  # The caller's placement, as on a remote cluster.
      with tf.GradientTape() as tape:
        with context.Training(True):
          loss, _ = pipe.FPropWithLoss(x, targets, _SquaredError)
      return tape.gradient(loss, list(pipe.trainable_variables))
  ops = Run.get_concrete_function(x).graph.get_operations()
  loss_ops = [op for op in ops if op.type in ('Square', 'Sub') or op.name.startswith('gradient_tape/')]
  assert any(op.type == 'Square' for op in loss_ops) and any(op.name.startswith('gradient_tape/') for op in loss_ops)
  last = pipe.ReplicaDevices(0)[-1]
  assert {op.device for op in loss_ops} == {last}, [(op.name, op.device) for op in loss_ops if op.device != last]


def test_batch_norm_under_one_f_one_b_moves_the_averages_by_the_whole_batch():
  layers = [linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8),
            batch_norm.BatchNormLayer.Params().Set(dim=8, decay=0.0),
            linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8)]
  plain, pipe = util.Pair(layers, num_splits=2, num_micro_batches=4, schedule='1f1b')
  x = tf.constant(np.random.RandomState(1).normal(size=(16, 8)), tf.float32)
  _LossAndGrads(pipe, x, tf.zeros([16, 8]), True)
  with context.Training(True):
    mean, variance = tf.nn.moments(plain.sub[0].FProp(x), axes=[0])
  np.testing.assert_allclose(pipe.units[1].moving_mean.numpy(), mean.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(pipe.units[1].moving_variance.numpy(), variance.numpy(), rtol=1e-4, atol=1e-6)


def test_plain_fprop_in_training_is_a_clear_error_and_eval_runs_the_forward():
  plain, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=2, schedule='1f1b')
  x = tf.ones([4, 8])
  with context.Training(True), pytest.raises(errors.ConfigError, match='computes the loss inside the pipeline'):
    pipe.FProp(x)
  np.testing.assert_allclose(pipe.FProp(x).numpy(), plain.FProp(x).numpy(), rtol=1e-6)


def test_the_plan_keeps_at_most_k_minus_k_micro_batches_in_flight():
  plan = schedule.MakePlan('1f1b', 8, 4, 'never')
  for device in range(4):
    in_flight, most = 0, 0
    for a in plan.DeviceActions(device):
      in_flight += {'forward': 1, 'backward': -1}.get(a.kind, 0)
      most = max(most, in_flight)
    assert most == 4 - device
  gpipe = schedule.MakePlan('gpipe', 8, 4, 'never')
  assert [a.kind for a in gpipe.DeviceActions(0) if a.kind != 'send'][:8] == ['forward'] * 8


_INTERLEAVED = 'schedule=interleaved_1f1b;task.network.virtual_stages=2'


@pytest.mark.parametrize('name,override', [
    (name, override)
    for name in util.PipelinedModels(steppable_only=True)
    for override in ('schedule=1f1b', _INTERLEAVED, 'schedule=zero_bubble')
    # AmoebaNet-D takes 20-25 s a case under the other two; batch norm under them is covered by ResNet here and by
    # test_zero_bubble.py and test_keras.py, and AmoebaNet's cells by its 1f1b case.
    if 'AmoebaNet' not in name or override == 'schedule=1f1b'])
@pytest.mark.slow
def test_registered_models_train_a_step_with_the_loss_inside(name, override):
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  p = run_params.BuildModelParams(name, override='task.network.%s;task.network.num_micro_batches=2' % override)
  p.input.batch_size = 4
  task = p.task.Instantiate()
  opt, lr = task.CreateOptimizer(), task.CreateLearningRateSchedule()
  batch = next(iter(p.input.Instantiate().GetDataset()))
  out = tf.function(autograph=False, func=lambda b: task.TrainStep(b, tf.constant(0, tf.int64), opt, lr))(batch)
  assert bool(out.is_finite) and np.isfinite(float(out.loss))


def test_the_registered_pipelined_models_are_all_covered():
  assert {'image.cifar10.AmoebaNetD', 'mt.multilingual.TransformerGPipe', 'synthetic.DeepMlpGPipe'} <= set(
      util.PipelinedModels(steppable_only=True))


@pytest.mark.parametrize('schedule_name,v', [('1f1b', 1), ('interleaved_1f1b', 2), ('zero_bubble', 1)])
@pytest.mark.slow
def test_the_measured_timeline_follows_the_plan(schedule_name, v):
  from lingpipe.gpipe import timeline  # pylint: disable=g-import-not-at-top
  num_micro, num_devices = 4, 2
  _, pipe = util.Pair(util.Tanh(4, dim=64), num_splits=num_devices, num_micro_batches=num_micro,
                      schedule=schedule_name, virtual_stages=v)
  x = tf.constant(np.random.RandomState(0).normal(size=(32, 64)), tf.float32)
  recorder = timeline.Recorder()
  recorded = ttu.RecordedLossStep(pipe, _SquaredError, recorder, tf.zeros_like)
  events = recorder.Events(recorded(x)[1])
  plan = schedule.MakePlan(schedule_name, num_micro, num_devices * v, 'always', num_devices)
  assert len({pipe.devices[c] for c in range(pipe.num_cells)}) == num_devices
  for d in range(num_devices):  # Each device ran its forwards and backwards interleaved, in the plan's order.
    measured = [(e.kind, e.micro_batch, e.cell) for e in sorted(events, key=lambda e: e.start)
                if e.device == pipe.devices[d]]
    planned = [(a.kind, a.micro_batch, a.cell) for a in plan.DeviceActions(d) if a.kind != plan_lib.SEND]
    assert [e for e in measured if e[0] != timeline.RECOMPUTE] == planned
    # Each cell's first backward re-computes early (backward_kinds.EARLY_RECOMPUTE): right before that backward.
    for i, (kind, m, cell) in enumerate(measured):
      if kind == timeline.RECOMPUTE:
        assert measured[i + 1] == (plan_lib.BACKWARD, m, cell), measured


def test_virtual_stages_errors_name_the_fix():
  with pytest.raises(errors.ConfigError, match="virtual_stages=2 needs schedule='interleaved_1f1b'"):
    util.Pair(util.Tanh(4), num_splits=2, virtual_stages=2)
  with pytest.raises(errors.ConfigError, match='virtual_stages must be >= 1'):
    util.Pair(util.Tanh(4), num_splits=2, schedule='interleaved_1f1b', virtual_stages=0)
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  cells = [linear.ProjectionLayer.Params().Set(name='c%d' % i, input_dim=8, output_dim=8) for i in range(3)]
  with pytest.raises(errors.ConfigError, match='3 cells in cell_tpl cannot be spread as virtual_stages=2'):
    pipelining_layer.PipeliningLayer.Params().Set(name='p', cell_tpl=cells, schedule='interleaved_1f1b',
                                                  virtual_stages=2).Instantiate()
