"""cell_gradient: the re-computing backward reuses the cell's gradient, computes what a tape does, and frees the
re-computed activations as it goes (its backward's ops are copied, not called); a saving forward and its backward
compute what a tape does, with what they keep as data, in a loop too."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import ops  # pylint: disable=g-direct-tensorflow-import

from lingpipe.gpipe.engine import cell_gradient
from lingpipe.gpipe.engine import gradient_sums
from lingpipe.gpipe.engine import tensor_lists
from lingpipe.layers import linear
import pipeline_test_util as util


def _Cell():
  """A traced cell as pipelining_layer makes them: (inputs, micro_batch_index, params) -> (outputs, moments)."""

  def Cell(inputs, micro_batch_index, params):
    w, b = params
    h = tf.tanh(tf.matmul(inputs, w) + b) * tf.cast(micro_batch_index + 1, tf.float32)
    return tf.gather(h, [1, 0, 2, 3]), {'mean': tf.reduce_mean(h, 0)}

  return tf.function(Cell, autograph=False, experimental_attributes={'_noinline': True})


def test_the_recomputing_backward_computes_what_a_tape_does():
  """Also pins the private TensorFlow API the module rests on: it fails at once if an upgrade moves it."""
  rng = np.random.RandomState(0)
  x = tf.constant(rng.normal(size=(4, 3)), tf.float32)
  params = [tf.constant(rng.normal(size=(3, 5)), tf.float32), tf.constant(rng.normal(size=(5,)), tf.float32)]
  dy = tf.constant(rng.normal(size=(4, 5)), tf.float32)
  cell = _Cell()
  gradient = cell_gradient.CellGradient(cell)

  @tf.function(autograph=False)
  def Both(x, params, dy):
    index = tf.constant(1, tf.int64)
    with tf.GradientTape() as tape:
      tape.watch([x] + params)
      out = cell(x, index, params)[0]
    taped = tape.gradient(out, [x] + params, output_gradients=dy)
    input_grads, param_grads = gradient.Backward(x, index, params, dy)
    return taped, input_grads + param_grads

  taped, recomputed = Both(x, params, dy)
  for a, b in zip(taped, recomputed):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


def test_an_unwanted_input_gets_no_gradient():
  rng = np.random.RandomState(1)
  x = tf.constant(rng.normal(size=(4, 3)), tf.float32)
  params = [tf.constant(rng.normal(size=(3, 5)), tf.float32), tf.constant(rng.normal(size=(5,)), tf.float32)]
  gradient = cell_gradient.CellGradient(_Cell())

  @tf.function(autograph=False)
  def Grads(x):
    return gradient.Backward(x, tf.constant(0, tf.int64), params, tf.ones([4, 5]), wanted=[False])

  input_grads, param_grads = Grads(x)
  assert input_grads == [None]
  assert [g.shape for g in param_grads] == [(3, 5), (5,)]


def _CountingGradient(monkeypatch, op_type):
  """A list that grows by one each time TensorFlow builds the gradient of an `op_type` op."""
  calls = []
  entry = ops._gradient_registry._registry[op_type]  # pylint: disable=protected-access
  grad_fn = entry['type']

  def Counting(op, *grads):
    calls.append(op)
    return grad_fn(op, *grads)

  monkeypatch.setitem(ops._gradient_registry._registry, op_type,  # pylint: disable=protected-access
                      dict(entry, type=Counting))
  return calls


@pytest.mark.parametrize('policy', ['always', 'except_last', 'never'])
def test_each_layers_gradient_is_built_once_under_every_policy(policy, monkeypatch):
  """Under 'always' the last micro-batch of each cell is taped (its backward comes next on its device) and the
  others re-compute: both use the one gradient TensorFlow builds for the cell's function. Before, the re-computing
  backward traced the layers again and built their gradients a second time. The four layers are of one kind, so
  their gradient is the one of their shared function (layer_functions.py), built once for both cells, where the
  backward re-computes."""
  built = _CountingGradient(monkeypatch, 'Tanh')
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=4, remat=policy)
  x = tf.constant(np.random.RandomState(2).normal(size=(8, 8)), tf.float32)
  util.LossAndGrads(pipe, x)
  shared = policy != 'never'  # Under 'never' the layers run unrolled (pipelining_layer.py says why).
  assert len(built) == (1 if shared else 4), built
  # Two kinds of two layers and one layer of a kind of its own: one gradient each.
  built.clear()
  wider = linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=16, activation='tanh')
  _, pipe = util.Pair(util.Tanh(2) + [wider] + util.Tanh(2, dim=16), num_splits=1, num_micro_batches=4,
                      remat=policy)
  util.LossAndGrads(pipe, x)
  assert len(built) == (3 if shared else 5), built


def _SavedCase(seed):
  rng = np.random.RandomState(seed)
  xs = tf.constant(rng.normal(size=(3, 4, 3)), tf.float32)  # Three micro-batches.
  params = [tf.constant(rng.normal(size=(3, 5)), tf.float32), tf.constant(rng.normal(size=(5,)), tf.float32)]
  dys = tf.constant(rng.normal(size=(3, 4, 5)), tf.float32)
  return xs, params, dys


def _Taped(cell, xs, params, dys):
  """Per micro-batch m, the gradients of cell(xs[m], m, params) for dys[m], from a tape."""
  grads = []
  for m in range(3):
    x = xs[m]
    with tf.GradientTape() as tape:
      tape.watch([x] + params)
      out = cell(x, tf.constant(m, tf.int64), params)[0]
    grads.append(tape.gradient(out, [x] + params, output_gradients=dys[m]))
  return grads


def test_a_saving_forward_and_its_backward_compute_what_a_tape_does_in_a_loop():
  """remat 'never' in a loop: each forward's saved tensors go on the executor's stacks (tensor_lists.Push, one
  TensorList per dtype), the backwards pop them last in, first out (tensor_lists.Pop), in a second loop, and add
  their parameter gradients to the sums (the first backward, before the loop, assigns them)."""
  xs, params, dys = _SavedCase(4)
  cell = _Cell()
  gradient = cell_gradient.CellGradient(cell)
  device = '/device:CPU:0'
  sums = gradient_sums.GradientSums([p.shape for p in params], [p.dtype for p in params], device, 'test')

  @tf.function(autograph=False)
  def Looped(xs, params, dys):
    index = tf.constant(0, tf.int64)
    _, saved = gradient.SavingForward(xs[0], index, params)  # Only to create the stacks, as an unrolled tick does.
    empty = tensor_lists.Push(None, gradient.Varying(xs[0], params, saved), device, push=False)

    def Forward(m, stacks):
      _, saved = gradient.SavingForward(xs[m], tf.cast(m, tf.int64), params)
      return m + 1, tensor_lists.Push(stacks, gradient.Varying(xs[0], params, saved), device)

    _, stacks = tf.while_loop(lambda m, _: m < 3, Forward, (0, empty))

    def Backward(m, stacks, token, grads):
      stacks, varying = tensor_lists.Pop(stacks, gradient.VaryingSpecs(xs[0], params), device)
      saved = gradient.Restore(xs[0], params, varying)
      in_grads, token = gradient.SavedBackward(xs[0], index, params, saved, dys[m], sums, token)
      return m - 1, stacks, token, grads.write(m, in_grads[0])

    grads = tf.TensorArray(tf.float32, size=3)
    _, stacks, token, grads = Backward(2, stacks, None, grads)
    _, _, token, grads = tf.while_loop(lambda m, *_: m >= 0, Backward, (1, stacks, token, grads))
    return grads.stack(), sums.Read(token)

  input_grads, param_sums = Looped(xs, params, dys)
  taped = _Taped(cell, xs, params, dys)
  for m, grads in enumerate(taped):
    np.testing.assert_allclose(input_grads[m], grads[0], rtol=1e-6, atol=1e-6)
  for i, param_sum in enumerate(param_sums):
    np.testing.assert_allclose(param_sum, sum(grads[1 + i] for grads in taped), rtol=1e-5, atol=1e-5)


def test_what_every_call_passes_alike_is_not_saved_per_call():
  """Parameters and constants are the same in every call: pushing them per micro-batch would cost a push and a pop
  each (a Transformer layer's backward reads 8 weights and 6 constants of its 37 tensors)."""
  xs, params, _ = _SavedCase(5)
  gradient = cell_gradient.CellGradient(_Cell())

  @tf.function(autograph=False)
  def Saved(x):
    _, saved = gradient.SavingForward(x, tf.constant(0, tf.int64), params)
    varying = gradient.Varying(x, params, saved)
    restored = gradient.Restore(x, params, varying)
    return saved, varying, restored

  saved, varying, restored = Saved(xs[0])
  assert 0 < len(varying) < len(saved)
  assert [s.shape for s in gradient.VaryingSpecs(xs[0], params)] == [t.shape for t in varying]
  assert any(np.array_equal(t.numpy(), params[0].numpy()) for t in saved)  # W: MatMul's gradient reads it.
  assert not any(t.shape == params[0].shape and np.array_equal(t.numpy(), params[0].numpy()) for t in varying)
  for a, b in zip(saved, restored):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
