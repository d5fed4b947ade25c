"""Checks of a serving signature's inputs, inside the exported graph.

A loaded SavedModel signature checks its inputs' dtypes but not their shapes (measured, TF 2.21: features of shape
[2, 16, 1] for a [None, 16] signature ran, and [2, 5] failed deep inside as "Matrix size-incompatible"), and value
errors (an unknown language) surfaced from whichever op failed first. So every input is checked first, and all the
computation waits on the checks: a bad request gets an InvalidArgumentError whose message names the input, what
was expected and what came, e.g.

    assertion failed: [Input `features` must have shape [batch, 16] (float32); got shape] [2 5]

`CheckedInputs` is what the exporter applies to every signature (rank and known dimensions); tasks add value
checks with `Require` and run their computation on `After(checks, ...)`.
"""

import tensorflow as tf


def _ShapeText(shape, batch_dims=1):
  dims = ['batch' if i < batch_dims and d is None else ('?' if d is None else str(d)) for i, d in enumerate(shape)]
  return '[%s]' % ', '.join(dims)


def CheckShape(name, x, shape):
  """An Assert op: `x` has the rank and the known dimensions of `shape` (a TensorShape of known rank)."""
  # Through PlaceholderWithDefault the static shape is unknown, so graph optimization cannot fold the check away
  # using the signature's declared shape (it did: a rank check passed a rank-3 input).
  dynamic = tf.shape(tf.raw_ops.PlaceholderWithDefault(input=x, shape=tf.TensorShape(None)))
  rank = shape.rank
  ok = tf.equal(tf.size(dynamic), rank)
  known = [i for i, d in enumerate(shape) if d is not None]
  if known:
    padded = tf.concat([dynamic, -tf.ones([rank], tf.int32)], 0)[:rank]
    ok = tf.logical_and(ok, tf.reduce_all(tf.equal(tf.gather(padded, known), [shape[i] for i in known])))
  what = 'be a scalar' if rank == 0 else 'have shape %s' % _ShapeText(shape)
  return tf.debugging.Assert(ok, ['Input `%s` must %s (%s); got shape' % (name, what, x.dtype.name), dynamic])


def Require(condition, message, *data):
  """An Assert op with `message` and `data` (tensors shown after it) when `condition` does not hold."""
  return tf.debugging.Assert(condition, [message] + list(data), summarize=20)


def After(checks, *tensors):
  """`tensors`, as identities that run only after the Assert ops `checks` passed."""
  with tf.control_dependencies(list(checks)):
    outs = [tf.identity(t) for t in tensors]
  return outs[0] if len(outs) == 1 else outs


def CheckedInputs(named, specs):
  """{name: tensor} of a signature's inputs, each checked against its TensorSpec (rank and known dimensions) and
  given back its static shape."""
  if not named:
    return named
  checks = [CheckShape(name, named[name], specs[name].shape) for name in named
            if specs[name].shape.rank is not None]
  names = list(named)
  checked = After(checks, *[named[n] for n in names])
  checked = [checked] if len(names) == 1 else checked
  return {n: tf.ensure_shape(t, specs[n].shape) for n, t in zip(names, checked)}
