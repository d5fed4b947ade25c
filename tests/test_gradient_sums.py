"""gradient_sums: a pipelined cell sums its micro-batches' weight gradients in place, in every kind of backward,
holding one copy of its weights' size and the gradient of the layer it is at; the sums are no part of the model."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import memory_stats
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import linear
import pipeline_test_util as util

DIM, LAYERS, BATCH = 256, 16, 32


def _Pipeline(schedule, remat, num_splits):
  layers = [linear.ProjectionLayer.Params().Set(input_dim=DIM, output_dim=DIM, activation='tanh')
            for _ in range(LAYERS)]
  return pipelining_layer.PipeliningLayer.Params().Set(
      name='summed', layers=layers, num_splits=num_splits, num_micro_batches=4, remat=remat,
      schedule=schedule).Instantiate()


def _SquaredError(outputs, targets):
  rows = tf.cast(tf.shape(outputs)[0], outputs.dtype)
  loss = tf.reduce_sum(tf.square(outputs - targets)) / rows
  return loss, {'loss': (loss, rows)}


# Each kind of backward (backward_kinds.py): gpipe re-computes (remat 'always'), pops its saved stack
# ('never'), asks a tape for the last micro-batch ('except_last'); 1F1B's inline taped backwards ('never');
# zero bubble's WEIGHT actions.
@pytest.mark.parametrize('schedule,remat,num_splits', [
    ('gpipe', 'always', 1),
    pytest.param('gpipe', 'never', 1, marks=pytest.mark.slow),  # 2.3-2.6 s each: the full tier (quick loop 3:16).
    pytest.param('gpipe', 'except_last', 1, marks=pytest.mark.slow),
    pytest.param('gpipe', 'always', 2, marks=pytest.mark.slow),
    pytest.param('1f1b', 'never', 2, marks=pytest.mark.slow),
    pytest.param('zero_bubble', 'always', 2, marks=pytest.mark.slow)])
def test_a_step_holds_one_copy_of_the_weights_gradients(schedule, remat, num_splits):
  """The sums, the layer gradients in flight and the activations (16 layers of 256 KiB, so a few layers in flight
  stay a small share; 8 KiB a micro-batch's activation): 1.13-1.33x the weights above the step's start, quiet or
  beside two busy processes. Summed as tensors through each backward's call, gpipe's re-compute held the sum and a
  micro-batch's whole gradient: 2.1x (1F1B's and zero bubble's inline backwards added each layer's gradient as it
  came already: 1.2x). With 8 layers of 1 MiB, two cells on a loaded machine once reached 1.65x."""
  pipe = _Pipeline(schedule, remat, num_splits)
  rng = np.random.RandomState(0)
  x = tf.constant(rng.normal(size=(BATCH, DIM)), tf.float32)
  targets = tf.constant(rng.normal(size=(BATCH, DIM)), tf.float32)

  @tf.function(autograph=False)
  def Step(x):
    with tf.GradientTape() as tape, context.Training(True):
      if schedule == 'gpipe':
        loss, _ = _SquaredError(pipe.FProp(x), targets)
      else:
        loss, _ = pipe.FPropWithLoss(x, targets, _SquaredError)
    return [tf.reduce_sum(g) for g in tape.gradient(loss, pipe.trainable_variables)]

  Step(x)
  weights = sum(v.shape.num_elements() * 4 for v in pipe.trainable_variables)
  peak = memory_stats.PeakBytes(lambda: tf.nest.map_structure(lambda t: t.numpy(), Step(x)), 'CPU:0')
  assert peak < 1.65 * weights, (peak / 2**20, weights / 2**20)


def test_the_sums_are_no_part_of_the_model(tmp_path):
  plain, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=2)
  assert len(pipe.variables) == len(plain.variables)
  checkpoint = tf.train.Checkpoint(model=pipe)
  path = checkpoint.write(str(tmp_path / 'ckpt'))
  names = [name for name, _ in tf.train.list_variables(path)]
  assert not [name for name in names if 'gradient_sum' in name], names


def test_the_sums_hold_nothing_between_steps_nor_in_a_pipeline_that_never_trains():
  plain, pipe = util.Pair(util.Tanh(4, dim=64), num_splits=2, num_micro_batches=2)
  sums = [v for row in pipe._gradient_sums for cell in row for v in cell.variables]  # pylint: disable=protected-access
  pipe.FProp(tf.zeros([4, 64]), training=False)
  assert sums and all(int(tf.size(v)) == 0 for v in sums)
  x = tf.constant(np.random.RandomState(0).normal(size=(4, 64)), tf.float32)
  util.AssertClose(util.LossAndGrads(plain, x), util.LossAndGrads(pipe, x))  # A training step, as a tf.function.
  assert all(int(tf.size(v)) == 0 for v in sums)
