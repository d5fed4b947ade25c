"""Re-materialization: the backward pass of a segment that re-computes its forward instead of storing it.

On TF 2.21 (docs/design.md): `tf.recompute_grad` inside a `tf.function` often saves no memory,
because the executor may run every recomputation as soon as its inputs exist (i.e. during the
forward pass) and run weight gradients late, so all recomputed activations are alive at once. Two
control dependencies fix the order:
  1. the recomputation waits for the gradient arriving from the next segment, so it runs in the
     backward pass, one segment at a time;
  2. the gradient sent to the previous segment waits for this segment's weight gradients, so this
     segment's recomputed activations are freed before the previous segment starts re-computing.

`Backward` is the taped per-(cell, micro-batch) backward of the pipeline (its re-computing one,
`gradient_sums.SummingBackward`, re-computes through cell_gradient.py with the same two dependencies);
`Recompute(fn)` wraps any function of tensors with it, for re-materialization outside a pipeline.
"""

import tensorflow as tf
from tensorflow.python.eager import record  # pylint: disable=g-direct-tensorflow-import

from lingpipe.core import context


def WantsGrad(flat_inputs, wanted=None):
  """Per leaf of `flat_inputs`, whether a backward computes its gradient: `wanted[i]` (see
  WantedInputGrads) when given, else every float leaf."""
  if wanted is None:
    return [t.dtype.is_floating for t in flat_inputs]
  return [bool(w) and t.dtype.is_floating for t, w in zip(flat_inputs, wanted)]


def CutUnwanted(inputs, wanted):
  """`inputs` with the float leaves whose gradient is not `wanted` (WantsGrad) cut from any tape (stop_gradient)."""
  flat = tf.nest.flatten(inputs)
  return tf.nest.pack_sequence_as(inputs, [
      x if w or not x.dtype.is_floating else tf.stop_gradient(x) for x, w in zip(flat, WantsGrad(flat, wanted))])


def WantedInputGrads(flat_inputs):
  """Per leaf, whether the caller can use its gradient: a float leaf some active tape watches (it
  depends on trainable variables, or the caller watched it). A batch of images or of constant
  features is watched by none, and its gradient would be computed for nothing: cell 0's first layer
  would compute its input gradient, as costly as its weight gradient. Where no tape is active at all
  the gradient may be asked symbolically (tf.gradients, or a tf.function whose gradient is taken
  from outside), so every float leaf stays wanted."""
  floats = [t.dtype.is_floating for t in flat_inputs]
  if not record.could_possibly_record():
    return floats
  return [f and record.should_record_backprop([t]) for t, f in zip(flat_inputs, floats)]


def GradsOrZeros(grads, tensors):
  return [tf.zeros_like(t) if g is None else g for g, t in zip(grads, tensors)]


def FloatTargets(outputs, output_grads):
  """(the float leaves of `outputs`, their upstream gradients: zeros for None, cast to the leaf's
  dtype), the targets and output_gradients of a tape gradient."""
  float_outputs, float_grads = [], []
  for out, grad in zip(tf.nest.flatten(outputs), tf.nest.flatten(output_grads)):
    if out.dtype.is_floating:
      float_outputs.append(out)
      float_grads.append(tf.zeros_like(out) if grad is None else tf.cast(grad, out.dtype))
  return float_outputs, float_grads


def Backward(fn, variables, inputs, output_grads, tape=None, outputs=None, wanted=None):
  """(input grads, variable grads) of outputs = fn(inputs) for the upstream `output_grads`.

  `variables` are tf.Variables fn reads, or tensors it closes over (a pipeline cell's parameter
  values).

  With `tape` (recorded around the forward, together with its `outputs`), the stored activations are
  used; without it, `fn(inputs)` is recomputed after `output_grads` exist. Either way the input
  gradients are made to wait for the variable gradients. Input gradients follow
  tf.nest.flatten(inputs), None for non-float leaves and for those `wanted` (WantsGrad) leaves out;
  variable gradients follow `variables` (zeros for variables the segment does not use).
  """
  if tape is None:
    inputs = AfterGradient(inputs, output_grads)
  flat_inputs = tf.nest.flatten(inputs)
  wants = WantsGrad(flat_inputs, wanted)
  float_inputs = [t for t, w in zip(flat_inputs, wants) if w]
  if tape is None:
    with tf.GradientTape(watch_accessed_variables=False) as tape:
      tape.watch(float_inputs)
      tape.watch(variables)
      outputs = fn(inputs)
  float_outputs, float_grads = FloatTargets(outputs, output_grads)
  grads = tape.gradient(float_outputs, list(variables) + float_inputs, output_gradients=float_grads)
  in_grads = iter(grads[len(variables):])
  return WeightsFirst(grads[:len(variables)], variables, [next(in_grads) if w else None for w in wants],
                      flat_inputs, wants)


def AfterGradient(inputs, output_grads):
  """`inputs`, read once `output_grads` exist: (1) a re-computation from them runs in the backward pass."""
  with tf.control_dependencies([g for g in tf.nest.flatten(output_grads) if g is not None]):
    return tf.nest.map_structure(tf.identity, inputs)


def WeightsFirst(var_grads, variables, input_grads, flat_inputs, wants):
  """(input grads, variable grads) of a segment's backward: variable grads dense, zeros for None (a
  pipeline sums them over micro-batches; IndexedSlices, e.g. of an embedding, do not add up); input
  grads per flat input, None where not `wants`, zeros for None, and (2) made to wait for the
  variable grads, so the previous segment starts only once this one's weight gradients are done."""
  var_grads = [tf.convert_to_tensor(g) for g in GradsOrZeros(var_grads, variables)]
  with tf.control_dependencies(var_grads):
    input_grads = [tf.identity(tf.zeros_like(x) if g is None else g) if w else None
                   for x, g, w in zip(flat_inputs, input_grads, wants)]
  return input_grads, var_grads


def TapedBackward(params, inputs, upstream, tape, outputs, wanted=None):
  """Backward of a pipeline task whose forward ran on `tape` (remat 'never', the last micro-batch of
  'except_last'): (input grads, param grads) from the stored activations."""
  return Backward(None, params, inputs, upstream, tape=tape, outputs=outputs, wanted=wanted)


def AsInForward(snapshot):
  """The forward's blocks (`snapshot`, context.Snapshot) for re-computing it where its gradient is built, outside
  them: the same branch, dropout masks, micro-batch and rows; its batch-norm moments are dropped (the forward
  already moved or collected them)."""
  return context.Restored(snapshot, bn_stats=context.BatchNormStats(discard=True))


def Recompute(fn, variables_fn=None):
  """Wraps fn(*tensors) -> tensor(s) so that its backward re-computes it (see the module docstring).

  `variables_fn` returns the trainable variables fn reads (e.g. `lambda:
  layer.trainable_variables`); by default the variables TensorFlow saw fn read are used.
  """

  @tf.custom_gradient
  def Wrapped(*args):
    outputs = fn(*args)
    snapshot = context.Snapshot()

    def Grad(*dys, variables=None):
      used = list(variables_fn()) if variables_fn is not None else list(variables or [])
      with AsInForward(snapshot):
        input_grads, var_grads = Backward(lambda a: fn(*a), used, list(args),
                                          tf.nest.pack_sequence_as(outputs, list(dys)))
      by_ref = {v.ref(): g for v, g in zip(used, var_grads)}
      return input_grads, [by_ref.get(v.ref()) for v in (variables or [])]

    return outputs, Grad

  return Wrapped
