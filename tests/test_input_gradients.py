"""A pipeline computes the gradients of its inputs only where a tape can use them (remat.WantedInputGrads): images
or constant features get none, an input that depends on variables (or that the caller watches) gets its own."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core.nested_map import NestedMap
from lingpipe.gpipe.engine import remat
from lingpipe.gpipe.engine import step
import pipeline_test_util as util


def test_wanted_input_grads_follow_the_active_tapes():
  x, ids = tf.ones([2, 3]), tf.ones([2], tf.int32)
  v = tf.Variable(tf.ones([2, 3]))
  # No tape: the gradient may still be asked symbolically, so every float leaf stays wanted.
  assert remat.WantedInputGrads([x, ids]) == [True, False]
  with tf.GradientTape() as tape:
    assert remat.WantedInputGrads([x, ids]) == [False, False]
    assert remat.WantedInputGrads([x, v * 2.0]) == [False, True]
    tape.watch(x)
    assert remat.WantedInputGrads([x, ids]) == [True, False]
  assert remat.WantsGrad([x, ids, x]) == [True, False, True]
  assert remat.WantsGrad([x, ids, x], [True, True, False]) == [True, False, False]


def _Spy(monkeypatch):
  """Records the first cell's input gradient arrays each pipeline merges (None for a leaf it computed none for)."""
  seen = []
  merge = step.MergeInputGrads

  def Spy(pipe, first, *args):
    seen.append(list(first))
    return merge(pipe, first, *args)
  monkeypatch.setattr(step, 'MergeInputGrads', Spy)
  return seen


def _SquaredError(outputs, targets):
  rows = tf.cast(tf.shape(outputs.x)[0], tf.float32)
  loss = tf.reduce_sum(tf.square(outputs.x - targets)) / rows
  return loss, {'loss': (loss, rows)}


def _Run(layer, inputs, targets, watch, with_loss):
  """(loss, variable gradients, gradients of the watched leaves) of one training step."""
  loss, _, grads, watched_grads = util.LossStep(layer, inputs, targets, _SquaredError, with_loss,
                                                lambda inputs: [inputs[name] for name in watch], step=1)
  return loss, grads, watched_grads


@pytest.mark.parametrize('schedule,remat_policy', [
    ('gpipe', 'always'), ('gpipe', 'never'), ('gpipe', 'except_last'), ('1f1b', 'always'), ('1f1b', 'never'),
    ('zero_bubble', 'never'), ('zero_bubble', 'always')])
@pytest.mark.parametrize('watch', [(), ('x',), ('x', 'skip')])
@pytest.mark.slow
def test_only_watched_inputs_get_gradients_and_the_rest_match_the_plain_model(schedule, remat_policy, watch,
                                                                              monkeypatch):
  layers = [util.SkipProjection.Params().Set(dim=4) for _ in range(4)]
  plain, pipe = util.Pair(layers, num_splits=2, num_micro_batches=4, remat=remat_policy, schedule=schedule)
  rng = np.random.RandomState(0)
  inputs = NestedMap(x=tf.constant(rng.normal(size=(8, 4)), tf.float32),
                     skip=tf.constant(rng.normal(size=(8, 4)), tf.float32),
                     mask=tf.constant(rng.randint(0, 2, size=8), tf.int32))
  targets = tf.constant(rng.normal(size=(8, 4)), tf.float32)
  seen = _Spy(monkeypatch)
  with_loss = schedule != 'gpipe'
  util.AssertClose(_Run(plain, inputs, targets, watch, False), _Run(pipe, inputs, targets, watch, with_loss))
  # Flattened NestedMap leaves are in key order: mask, skip, x.
  computed = [a is not None for a in seen[-1]]
  assert computed == [False, 'skip' in watch, 'x' in watch]


@pytest.mark.parametrize('wanted', [(True,), (False,)])
def test_a_taped_first_cell_differentiates_only_the_wanted_inputs(wanted):
  """The gradient of a traced cell call is the whole function's, for every float input: cell 0's call cuts the
  inputs whose gradient nobody wants, so a taped backward (remat 'never') does not compute it."""
  _, pipe = util.Pair(util.Tanh(4, dim=4), num_splits=2, num_micro_batches=2)
  cell = pipe.functions.Forward(0, 0, True, wanted=wanted)
  x = tf.constant(np.random.RandomState(0).normal(size=(3, 4)), tf.float32)

  @tf.function(autograph=False)
  def Grad(x):
    params = pipe.Pipe(x).cell_params[0].Read(None)
    with tf.GradientTape() as tape:
      tape.watch(x)
      out, _ = cell(x, tf.constant(0, tf.int64), params)
    return tape.gradient(out, x)
  grad = Grad(x)
  assert (grad is not None and np.any(grad.numpy() != 0)) == wanted[0]
