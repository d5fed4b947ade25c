"""A cell's backward split in two, for the zero-bubble schedule: input gradients now, weight gradients later.

The backward of y = cell(x, params) is usually one computation: dx and dparams from dy. Zero bubble
(schedule.py) runs dx first (the previous cell waits for it) and dparams later, in what would be
idle time. Computing them as two tape gradients of the whole cell would do the work twice: dparams
of the first layer needs the gradients of every later layer's activations, which dx computed
already. So the split is made at the ops that read the weights:

  - `Record` runs the cell's forward inline, in the caller's graph (a traced function call would
    hide its ops), under one tape that records everything from the inputs and parameters, and one
    tape per parameter, which records only what depends on that parameter. The parameter values are
    fresh tensors for this call, so the ops that read them (their graph consumers: a MatMul, a Mul
    of a norm's scale, a Gather of an embedding) are this micro-batch's.
  - `InputGrads` asks the first tape, in one backward sweep, for the gradients of the inputs and of
    the outputs of every op reading a parameter: the activation gradients dx needs anyway. Nothing
    asks for a weight gradient, so the graph runtime prunes those ops from this sweep.
  - `WeightGrads` then takes, for each parameter, the gradient of its reading op's outputs (given
    the gradients the sweep found for them) on the parameter's own tape: the reading op's own weight
    gradient (e.g. x^T dy), no activation gradients again. The own tape does not reach back through
    the op's other inputs, because they do not depend on that parameter (it is read once).

A parameter read by more than one op (a weight shared inside the cell) gets its gradient from the
first sweep instead, which is exact too, only not deferred. Needs graph mode (`tf.function`), where
ops have consumers.
"""

import contextlib
from typing import Any, List, NamedTuple

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.gpipe.engine import remat


class Recorded(NamedTuple):
  """A cell's forward recorded for a split backward."""
  inputs: Any
  outputs: Any
  params: List[tf.Tensor]  # this call's parameter values
  tape: tf.GradientTape  # inputs and parameters -> everything
  param_tapes: List[tf.GradientTape]  # parameter i -> what depends on it
  wants: List[bool]  # per leaf of tf.nest.flatten(inputs): whether its gradient is computed (remat.WantsGrad)


class Pending(NamedTuple):
  """What WeightGrads needs, left by InputGrads."""
  params: List[tf.Tensor]
  param_tapes: List[tf.GradientTape]
  reads: List[Any]  # per parameter: its reading op's float outputs, or None (read by 0 or several ops)
  read_grads: List[Any]  # per parameter: the gradients of those outputs
  swept: List[Any]  # per parameter read by several ops: its gradient from the input sweep


def Record(forward, inputs, params, wanted=None):
  """forward(inputs, params) -> (outputs, extra) run under the tapes; returns (outputs, extra,
  Recorded). `wanted`: which input gradients InputGrads computes (remat.WantsGrad; default every
  float leaf)."""
  if tf.executing_eagerly():
    raise errors.ConfigError("schedule='zero_bubble' splits each backward at the ops that read the weights, which "
                             'needs a graph: run the training step inside tf.function (the trainer and Keras fit do).')
  params = [tf.identity(p) for p in params]  # Fresh tensors: their consumers are this call's ops only.
  param_tapes = [tf.GradientTape(watch_accessed_variables=False) for _ in params]
  tape = tf.GradientTape(watch_accessed_variables=False)
  wants = remat.WantsGrad(tf.nest.flatten(inputs), wanted)
  with contextlib.ExitStack() as stack:
    for p, param_tape in zip(params, param_tapes):
      stack.enter_context(param_tape)
      param_tape.watch(p)
    stack.enter_context(tape)
    tape.watch([t for t, w in zip(tf.nest.flatten(inputs), wants) if w] + params)
    outputs, extra = forward(inputs, params)
  return outputs, extra, Recorded(inputs, outputs, params, tape, param_tapes, wants)


# Ops that only re-shape or re-type a weight: the op reading their output is the one whose gradient
# is deferred.
_PASS_THROUGH = ('Identity', 'Cast', 'Reshape', 'ExpandDims', 'Squeeze')


def _ReadingOp(param):
  """The float outputs of the one op reading `param` (past pass-through ops), or None if there are
  none or several."""
  t = param
  while True:
    consumers = t.consumers()
    if len(consumers) != 1:
      return None
    op = consumers[0]
    if op.type not in _PASS_THROUGH or len(op.outputs) != 1:
      return [out for out in op.outputs if out.dtype.is_floating] or None
    t = op.outputs[0]


def InputGrads(recorded, upstream):
  """(gradients of the recorded inputs, per tf.nest.flatten(inputs), None for non-float and unwanted
  leaves; Pending)."""
  flat_inputs = tf.nest.flatten(recorded.inputs)
  float_inputs = [t for t, w in zip(flat_inputs, recorded.wants) if w]
  outputs, output_grads = remat.FloatTargets(recorded.outputs, upstream)
  reads = [_ReadingOp(p) for p in recorded.params]
  shared = [p for p, read in zip(recorded.params, reads) if read is None]
  sources = float_inputs + [t for read in reads if read for t in read] + shared
  grads = iter(recorded.tape.gradient(outputs, sources, output_gradients=output_grads))
  input_grads = iter(remat.GradsOrZeros([next(grads) for _ in float_inputs], float_inputs))
  read_grads = [[next(grads) for _ in read] if read else None for read in reads]
  swept = [None if read else next(grads) for read in reads]  # In the order of `shared`.
  flat = [next(input_grads) if w else None for w in recorded.wants]
  return flat, Pending(recorded.params, recorded.param_tapes, reads, read_grads, swept)


def WeightGrads(pending):
  """The parameters' gradients (dense; zeros for parameters the cell's outputs do not depend on)."""
  grads = []
  for p, tape, read, read_grad, swept in zip(pending.params, pending.param_tapes, pending.reads,
                                             pending.read_grads, pending.swept):
    g = swept
    if read is not None and any(r is not None for r in read_grad):
      g = tape.gradient(read, p, output_gradients=[tf.zeros_like(t) if r is None else r
                                                   for t, r in zip(read, read_grad)])
    grads.append(tf.zeros_like(p) if g is None else tf.convert_to_tensor(g))
  return grads
