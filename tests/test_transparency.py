"""Transparency through the one documented training call: the same code, FPropWithLoss(..., training=True), trains
every schedule, and gives the plain model's loss and gradients when micro-batches weigh differently (tokens per
micro-batch, as the NMT task has). With equal weights, averaging the micro-batches' gradients instead of weighting
them would pass unnoticed."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.gpipe import schedule as schedule_lib
import pipeline_test_util as util

_ROWS_PER_MICRO_BATCH = 3
_DIM = 8


def _TokenWeightedLoss(outputs, loss_inputs):
  """Squared error per token, averaged over the real tokens (mask 1): a micro-batch weighs its token count."""
  targets, mask = loss_inputs
  tokens = tf.reduce_sum(mask)
  loss = tf.reduce_sum(tf.reduce_sum(tf.square(outputs - targets), -1) * mask) / tokens
  return loss, {'loss': (loss, tokens)}


def _Batch(num_micro, seed):
  """Inputs, targets and a token mask whose real-token count differs from micro-batch to micro-batch."""
  rng = np.random.RandomState(seed)
  rows = num_micro * _ROWS_PER_MICRO_BATCH
  x = tf.constant(rng.normal(size=(rows, _DIM)), tf.float32)
  targets = tf.constant(rng.normal(size=(rows, _DIM)), tf.float32)
  mask = np.ones(rows, np.float32)
  for m in range(num_micro):  # Micro-batch m keeps 1 + m % 3 of its rows.
    mask[m * _ROWS_PER_MICRO_BATCH + 1 + m % _ROWS_PER_MICRO_BATCH:(m + 1) * _ROWS_PER_MICRO_BATCH] = 0.0
  return x, (targets, tf.constant(mask))


def _Train(layer, x, loss_inputs):
  """The documented training step: (loss, gradients of the variables and of x)."""

  @tf.function(autograph=False)  # zero_bubble needs a graph.
  def Step(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss, _ = layer.FPropWithLoss(x, loss_inputs, _TokenWeightedLoss, training=True)
    return loss, tape.gradient(loss, list(layer.trainable_variables) + [x])

  return Step(x)


def _Plain(layer, x, loss_inputs):
  @tf.function(autograph=False)
  def Step(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss, _ = _TokenWeightedLoss(layer.FProp(x), loss_inputs)
    return loss, tape.gradient(loss, list(layer.trainable_variables) + [x])

  return Step(x)


@pytest.mark.parametrize('schedule,k,m,remat,v', [
    ('gpipe', 3, 5, 'never', 1), ('1f1b', 3, 3, 'except_last', 1), ('interleaved_1f1b', 2, 4, 'never', 2),
    ('zero_bubble', 2, 4, 'always', 1), ('gpipe', 2, 4, 'per_layer', 1), ('gpipe', 1, 1, 'per_layer', 1),
    ('gpipe', 1, 3, 'per_layer', 1), ('1f1b', 3, 3, 'per_layer', 1), ('interleaved_1f1b', 2, 4, 'per_layer', 2),
    ('zero_bubble', 2, 4, 'per_layer', 1)])
def test_one_training_call_gives_the_plain_token_weighted_loss_and_gradients(schedule, k, m, remat, v):
  plain, pipe = util.Pair(util.Tanh(6, dim=_DIM), num_splits=k, num_micro_batches=m, remat=remat,
                          schedule=schedule, virtual_stages=v)
  x, loss_inputs = _Batch(m, seed=k * 10 + m)
  util.AssertClose(_Plain(plain, x, loss_inputs), _Train(pipe, x, loss_inputs))


def test_the_same_code_trains_every_schedule():
  assert set(schedule_lib.SCHEDULES) == {'gpipe', '1f1b', 'interleaved_1f1b', 'zero_bubble'}, (
      'a new schedule needs a row in the test above')


def test_averaging_micro_batches_instead_of_weighting_them_would_be_caught():
  """The batch above makes the two differ: this test fails if the weights were equal."""
  x, (targets, mask) = _Batch(4, seed=1)
  plain, _ = util.Pair(util.Tanh(2, dim=_DIM), num_splits=1)
  outputs = plain.FProp(x)
  whole = _TokenWeightedLoss(outputs, (targets, mask))[0]
  parts = [_TokenWeightedLoss(outputs[i:i + 3], (targets[i:i + 3], mask[i:i + 3]))[0] for i in range(0, 12, 3)]
  assert abs(float(whole) - float(tf.reduce_mean(parts))) > 1e-3 * abs(float(whole))


def test_training_must_be_a_bool():
  _, pipe = util.Pair(util.Tanh(2, dim=_DIM), num_splits=2, num_micro_batches=2)
  x, loss_inputs = _Batch(2, seed=0)
  with pytest.raises(errors.ConfigError, match=r"training='yes': expected True, False or None"):
    pipe.FPropWithLoss(x, loss_inputs, _TokenWeightedLoss, training='yes')


def test_fprop_in_training_names_the_training_call_for_schedules_with_the_loss_inside():
  _, pipe = util.Pair(util.Tanh(2, dim=_DIM), num_splits=2, num_micro_batches=2, schedule='zero_bubble')
  x, _ = _Batch(2, seed=0)
  with pytest.raises(errors.ConfigError, match=r"FPropWithLoss\(inputs, loss_inputs, loss_fn, training=True\)"):
    pipe.FProp(x, training=True)
  assert pipe.FProp(x, training=False).shape == x.shape
