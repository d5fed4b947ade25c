"""What the executor runs and hands between actions: the cells (Cells), a phase's state (State),
what the forward pass leaves for the backward (Kept), and the ops of a SEND and of the stashes
(executor.py runs them)."""

from typing import Any, Callable, Dict, List, NamedTuple

import tensorflow as tf


class Cells(NamedTuple):
  """What the executor runs, one entry per cell (lists indexed by cell).

  forward[k](inputs, index, params) -> (outputs, {layer path: moments.Moments}[, (start, end)]);
  backward[k](inputs, upstream, index, params, token) -> (input grads, token[, stamps]), for a cell's
  later re-computing backwards (its first runs inline from `body`: backward_kinds.EARLY_RECOMPUTE),
  adding its parameter gradients to sums[k] (gradient_sums.GradientSums: the token of the sum so
  far in, of the new sum out); taped_backward(params, inputs, upstream, tape, outputs, wanted)
  -> (input grads, param grads). The [start, end] outputs exist when `stamped` (timeline.Stamped).
  body[k](inputs, index, params, recomputing) -> (outputs, moments): cell k's forward traced inline
  (plans that split the backward record it, split_backward.py; `recomputing` discards the moments).
  wanted: per leaf of cell 0's inputs, whether its gradient is computed (remat.WantedInputGrads;
  None: every float leaf). backward[0] must compute the same ones. Later cells compute every float
  input gradient: the previous cell needs them. saving[k]: cell_gradient.CellGradient of forward[k]:
  forwards that keep their activations return them as data (SavingForward) where the plan allows it
  (step_facts.Derive), so that they can loop. sums[k]: where cell k's parameter gradients are summed
  in training.
  """
  devices: List[str]
  params: List[List[tf.Tensor]]
  forward: List[Callable]
  backward: List[Callable] = None
  taped_backward: Callable = None
  body: List[Callable] = None
  wanted: List[bool] = None
  saving: List[Any] = None
  sums: List[Any] = None

  def Wanted(self, k):
    """Cell k's `wanted` (see above): which input gradients its backward computes, None for every float one."""
    return self.wanted if k == 0 else None


class State(NamedTuple):
  """What the actions of a phase hand each other (loop state when the phase loops)."""
  mail: Dict  # {(sender cell, receiving cell): tuple of messages in flight, oldest first}
  produced: Dict  # {cell: its result not yet sent}
  last: Dict  # {device: tensors its last action produced}: its next action waits for them
  stash: Dict  # {cell: [TensorArray per input leaf]}: inputs the re-computing backward reads
  outputs: Dict  # {last cell: [TensorArray per output leaf]}
  moments: Dict  # {cell: {layer path: moments.Moments}}, summed over micro-batches
  accumulated: Dict  # {cell: [the token of its gradient sum so far]} (gradient_sums.py)
  input_grads: Dict  # {0: [TensorArray per float input leaf]}
  times: Dict  # {(kind, cell): TensorArray of (micro-batch, start, end)} while recording
  saved: Dict  # {cell: {dtype name: TensorList}}: the tensors its looped saving forwards keep, a stack per dtype


def EmptyState():
  """A State holding nothing yet: where a phase starts."""
  return State(*[{} for _ in State._fields])


class Kept(NamedTuple):
  """What the forward pass leaves for the backward."""
  inputs: Any  # MicroBatches: cell 0's inputs
  stash: Dict  # State.stash
  tapes: Dict  # {(micro-batch, cell): backward_kinds.Taped} of stored-tape forwards
  like: Dict  # {cell: the structure of its inputs, 'out': that of the last cell's outputs}
  last: Dict = None  # {device: what its last forward produced}: the backward phase starts there (State.last)
  saved: Dict = None  # State.saved at the end of the forward pass
  saves: Dict = None  # {(micro-batch, cell): the tensors an unrolled saved-stack forward kept for its backward}
  recorded: Dict = None  # {(micro-batch, cell): split_backward.Recorded} of split forwards


class ForwardResult(NamedTuple):
  outputs: Any  # the last cell's outputs, stacked: [M, micro-batch ...] leaves
  moments: Dict  # {layer path: moments.Moments} of the whole mini-batch
  kept: Kept


def HandOff(structure, device):
  """`structure` copied onto `device` (a SEND)."""
  with tf.device(device):
    return tf.nest.map_structure(lambda t: None if t is None else tf.identity(t), structure)


def CutFromCallerTapes(inputs, params, devices):
  """(inputs, params) as a pipeline's custom gradient hands them to the executor: the same values,
  no longer watched by the caller's tapes (its gradients come from the custom gradient, never
  through the body). The executor's own tapes watch them explicitly; were a caller's tape watching
  too, TensorFlow would treat each taped cell call as possibly higher-order and build the cell's
  gradient functions three times instead of once (most of a large model's trace time). Each cut runs
  where its tensors live: the inputs on cell 0's device (devices[0]), cell k's parameters
  (params[k]) on cell k's; unplaced, a cut was put elsewhere and each step copied the parameters
  there and back."""
  def Cut(structure, device):
    with tf.device(device):
      return tf.nest.map_structure(tf.stop_gradient, structure)
  return Cut(inputs, devices[0]), [Cut(p, d) for p, d in zip(params, devices)]


def Write(arrays, m, structure, num_micro, device):
  """TensorArrays (one per leaf of `structure`, created on `device` on the first write) with `structure` at m."""
  leaves = tf.nest.flatten(structure)
  with tf.device(device):
    if arrays is None:
      arrays = [tf.TensorArray(t.dtype, size=num_micro, element_shape=t.shape) for t in leaves]
    written = [a.write(m, t) for a, t in zip(arrays, leaves)]
  for a in written:  # A pass that is never differentiated leaves its stash unread, by design.
    getattr(a, 'mark_used', lambda: None)()  # Only graph-mode arrays are wrapped by tf_should_use.
  return written


def Read(arrays, m, like, device):
  with tf.device(device):
    return tf.nest.pack_sequence_as(like, [a.read(m) for a in arrays])
