"""Every registered model builds and runs one training step (generated: one test per model).

The step uses the model's own Train() input and task with the batch size cut to the smallest one its
pipelines accept (at least 2), so this stays fast for big models too.
"""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import cluster
from lingpipe.core import model_registry

MODELS = sorted(model_registry.GetAllRegisteredModels())


@pytest.mark.parametrize('name', MODELS)
def test_model_builds_and_trains_one_step(name):
  p = model_registry.GetParams(name, 'Train')
  p.input.batch_size = min(p.input.batch_size, max([2] + [q.num_micro_batches for q in cluster.PipelineParams(p.task)]))
  p.input.shuffle_buffer_size = 16
  task = p.task.Instantiate()
  opt = task.CreateOptimizer()
  schedule = task.CreateLearningRateSchedule()
  batch = next(iter(p.input.Instantiate().GetDataset()))
  before = [v.numpy().copy() for v in task.trainable_variables]
  out = tf.function(autograph=False, func=lambda b: task.TrainStep(b, tf.constant(0, tf.int64), opt, schedule))(batch)
  assert bool(out.is_finite) and np.isfinite(float(out.loss))
  changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, task.trainable_variables)]
  assert all(changed), [v.name for v, c in zip(task.trainable_variables, changed) if not c]
