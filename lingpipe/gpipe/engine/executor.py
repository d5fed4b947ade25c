"""Runs a schedule's Plan (schedule.py) as TensorFlow ops: the plan decides, the executor only interprets it.

Each FORWARD or BACKWARD action is one call of the cell's traced function on the cell's device; each
device's actions are chained in plan order (an action waits for what the device's previous action
produced, its gradient sum included); the only edges between devices are the SENDs. A phase's steady
ticks run as one loop (phase_loop.py). Plans that split the backward (zero bubble) and, where a
forward keeps its activations, plans with the loss inside trace their cells inline instead
(Cells.body), so that weight gradients can be deferred or summed layer by layer. What a later action
needs lives in State and Kept. docs/design.md says why each rule is there.
"""

import tensorflow as tf

from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import timeline
from lingpipe.gpipe.engine import phase_loop
from lingpipe.gpipe.engine import remat
from lingpipe.gpipe.engine import split_backward
from lingpipe.gpipe.engine.executor_types import Cells  # pylint: disable=unused-import  (part of the executor's API)
from lingpipe.gpipe.engine.executor_types import CutFromCallerTapes  # pylint: disable=unused-import
from lingpipe.gpipe.engine.executor_types import EmptyState
from lingpipe.gpipe.engine.executor_types import ForwardResult
from lingpipe.gpipe.engine.executor_types import HandOff
from lingpipe.gpipe.engine.executor_types import Kept
from lingpipe.gpipe.engine.executor_types import Read
from lingpipe.gpipe.engine.executor_types import Write


class _Interpreter:
  """Runs one action of a plan on a State: the FORWARD, BACKWARD, WEIGHT and SEND of every phase and
  schedule. How a backward gets what it differentiates is its bound strategy's
  (backward_kinds.Bind); stamping while a timeline records is `Timed`'s."""

  def __init__(self, facts, cells, inputs=None, upstreams=None, kept=None, loss=None, recording=False):
    plan = facts.plan
    self.plan, self.cells, self.inputs, self.upstreams, self.loss = plan, cells, inputs, upstreams, loss
    self.kept = kept or Kept(inputs, {}, {}, {}, saves={}, recorded={})
    self.recording = recording
    # While recording a plan whose actions are traced inline, the runtime interleaves the ops of a
    # device's neighbouring actions (a W with the next F), so their stamps overlapped and ran late:
    # there, the device's next action also waits for the previous one's end stamp, and each box is
    # one action alone on its device. Hand-offs do not wait for it.
    self.serialize = recording and (plan.splits_backward or loss is not None)
    self.ends = {}  # {device: the end stamp of its last externally timed action}, while serializing
    self.unit_end = None  # While recording: the end stamp of this action's previous timed unit, written.
    self.dy = {}  # {micro-batch: gradient of its loss share w.r.t. the last cell's outputs} (with a loss)
    # An unrolled phase with a loss (1F1B) keeps cell inputs as tensors, freed once their backward
    # read them (a TensorArray frees nothing until the step ends, which kept all M micro-batches'
    # inputs alive).
    self.kept_inputs = {}
    self.saves, self.strategies, self.pushed = facts.saves, facts.strategies, facts.pushed  # step_facts.py
    self.pending = {}  # {(micro-batch, cell): split_backward.Pending} between a split BACKWARD and its WEIGHT
    # {device: cell}: the device's last action was a BACKWARD or WEIGHT of that cell, and its next
    # action also waits for the cell's gradient sum (Last). Not in state.last: a loop carries each
    # tensor of its state as one loop variable, the same tensor twice as two. As the steady ticks
    # repeat one pattern, a device's last action has the same kind and cell before the loop and at
    # the end of its body.
    self.sums_of = {}

  def __call__(self, a, m, state):
    self.unit_end = None
    if a.kind == plan_lib.SEND:
      state = self.Send(a, state)
    else:
      self.ends.pop(a.device, None)  # This action waits for it (state.last).
      state = {plan_lib.FORWARD: self.Forward, plan_lib.BACKWARD: self.Backward,
               plan_lib.WEIGHT: self.Weight}[a.kind](a, m, state)
    if a.device in self.ends:
      state.last[a.device] = list(state.last.get(a.device, [])) + [self.ends[a.device]]
    return state

  def Invariant(self):
    """The cells' parameters, as a loop carries them (phase_loop.Invariant)."""
    def Use(params):
      self.cells = self.cells._replace(params=params)
    return phase_loop.Invariant(self.cells.params, self.cells.devices, Use)

  def Last(self, state, device):
    """What the device's next action waits for: what its last action produced, its gradient sum included."""
    k = self.sums_of.get(device)
    return list(state.last.get(device, [])) + (list(state.accumulated[k]) if k is not None else [])

  def Timed(self, state, action, m, waits_for, call, stamped, kind=None):
    """call() on the action's cell's device, its (start, end) written to state.times[(kind, cell)]
    (rows of (m, start, end)) while recording: `stamped` calls return their own stamps as a last
    output (timeline.Stamped), others are stamped from outside (timeline.Timed, which waits for
    `waits_for`, the device's previous action and this action's previous unit). `kind` (default: the
    action's) RECOMPUTE: the early re-computation of a cell's first backward, one row per cell."""
    if not self.recording:
      return call()
    device = self.cells.devices[action.cell]
    if stamped:
      *outputs, stamps = call()
      outputs = tuple(outputs)
    else:
      waits = [waits_for, self.Last(state, action.device)] + ([self.unit_end] if self.unit_end is not None else [])
      outputs, stamps = timeline.Timed(device, waits, call)
      if self.serialize:
        self.ends[action.device] = stamps[1]
      stamps = tf.stack(stamps)
    key = (kind or action.kind, action.cell)
    num_micro = self.plan.num_micro_batches
    rows, row = (1, 0) if kind == timeline.RECOMPUTE else (num_micro, m)
    with tf.device(device):
      array = state.times.get(key) or tf.TensorArray(tf.float64, size=rows, element_shape=[3])
      state.times[key] = array.write(row, tf.concat([[tf.cast(m, tf.float64)], stamps], 0))
    self.unit_end = state.times[key].flow
    return outputs

  def Send(self, a, state):
    sent = HandOff(state.produced.pop(a.cell), self.cells.devices[a.to_cell])
    if a.to_cell < a.cell:  # Gradients: None (of a non-float leaf) cannot be loop state; the rest go by index.
      sent = {i: g for i, g in enumerate(sent) if g is not None}
    key = (a.cell, a.to_cell)
    state.mail[key] = state.mail.get(key, ()) + (sent,)
    return state  # The device's next action waits for the sending action (state.last), not for the copy.

  def MicroBatch(self, micro_batches, a, m, state):
    """micro_batches.At(m) (phase_loop.MicroBatches) for action `a`. In a loop it is a gather, a
    copy, made once the device's previous action is done: else the loop's iterations run ahead and
    make every iteration's copy at its start, which raises the peak memory."""
    if isinstance(m, int):  # A micro-batch of the list: no op.
      return micro_batches.At(m)
    with tf.control_dependencies(self.Last(state, a.device)):
      return micro_batches.At(m)

  def KeptInput(self, a, m, state):
    """The input a KEEP_INPUT forward of micro-batch m through the action's cell kept for its backward."""
    k = a.cell
    if k == 0:
      return self.MicroBatch(self.kept.inputs, a, m, state)
    if self.loss is not None:  # Kept in this phase (1F1B, unrolled: m is an int).
      return self.kept_inputs.pop((m, k))
    return Read(self.kept.stash[k], m, self.kept.like[k], self.cells.devices[k])  # Stashed by the forward phase.

  @staticmethod
  def _Receive(state, key):
    first, *rest = state.mail.pop(key)
    if rest:
      state.mail[key] = tuple(rest)
    return first

  def Forward(self, a, m, state):
    cells, k, num_micro = self.cells, a.cell, self.plan.num_micro_batches
    device, like = cells.devices[k], self.kept.like
    cell_in = self.MicroBatch(self.inputs, a, m, state) if k == 0 else self._Receive(state, (k - 1, k))
    like.setdefault(k, cell_in)
    with tf.device(device), tf.control_dependencies(self.Last(state, a.device)):
      if a.keep == plan_lib.KEEP_ACTIVATIONS:
        cell_out, moments = self.strategies[a].Keep(self, a, m, state, cell_in)
      else:
        call = lambda: cells.forward[k](cell_in, phase_loop.Index(m), cells.params[k])
        cell_out, moments = self.Timed(state, a, m, cell_in, call, stamped=True)
    if a.keep == plan_lib.KEEP_INPUT and k > 0:  # Cell 0's inputs are the micro-batches, kept anyway.
      if self.loss is not None:
        self.kept_inputs[(m, k)] = cell_in
      else:
        state.stash[k] = Write(state.stash.get(k), m, cell_in, num_micro, device)
    if k < self.plan.num_cells - 1:
      state.produced[k] = cell_out
    elif self.loss is not None:
      with tf.device(device):
        self.dy[m] = self.loss(m, cell_out)
    else:
      like['out'] = cell_out  # Only its structure is used.
      state.outputs[k] = Write(state.outputs.get(k), m, cell_out, num_micro, device)
    state.last[a.device] = tf.nest.flatten(cell_out)
    self.sums_of.pop(a.device, None)
    with tf.device(device):
      merged = state.moments.get(k, {})
      state.moments[k] = {path: merged[path].Merge(part) if path in merged else part
                          for path, part in moments.items()}
    return state

  def Backward(self, a, m, state):
    cells, k, kept = self.cells, a.cell, self.kept
    device, strategy = cells.devices[k], self.strategies[a]
    fetched = strategy.Fetch(self, a, m, state)
    if k < self.plan.num_cells - 1:
      received = self._Receive(state, (k + 1, k))
      flat = tf.nest.flatten(kept.like[k + 1])
      upstream = tf.nest.pack_sequence_as(kept.like[k + 1], [received.get(i) for i in range(len(flat))])
    else:
      upstream = self.dy.pop(m) if self.loss is not None else self.MicroBatch(self.upstreams, a, m, state)
    with tf.device(device), tf.control_dependencies(self.Last(state, a.device)):
      result = strategy.Backward(self, a, m, state, fetched, upstream)
    # The device's next action waits for the input gradients and the sum. Waiting for the input
    # gradients alone, GPipe's next backward ran beside this one's weight gradients (graph function
    # calls are inlined), above the planned peak. Waiting for nothing but the sum, grappler rewrites
    # the chain of adds into one AddN, which keeps every micro-batch's gradients alive until the
    # last. The price: one device with idle threads loses overlap.
    floats = [g for g in result.input_grads if g is not None]
    if k > 0:
      state.produced[k] = result.input_grads
    else:
      state.input_grads[0] = Write(state.input_grads.get(0), m, floats, self.plan.num_micro_batches, device)
    state.last[a.device] = floats + list(result.waits)
    if result.accumulated is None:  # A split backward: the sum waits for WEIGHT.
      self.sums_of.pop(a.device, None)
    else:
      state.accumulated[k] = result.accumulated
      self.sums_of[a.device] = k
    return state

  def Weight(self, a, m, state):
    """A WEIGHT action: the deferred weight gradients of micro-batch m's split BACKWARD, added to the sum."""
    k, device = a.cell, self.cells.devices[a.cell]
    pending = self.pending.pop((m, k))
    with tf.device(device), tf.control_dependencies(self.Last(state, a.device)):
      acc = state.accumulated.get(k)

      def Call():
        return [self.cells.sums[k].Add(split_backward.WeightGrads(pending), first=acc is None)]
      state.accumulated[k] = list(self.Timed(state, a, m, acc or [], Call, stamped=False))
    state.last[a.device] = []
    self.sums_of[a.device] = k
    return state


def _Record(recorder, name, kind, devices, state, plan):
  if recorder is None:
    return
  # RECOMPUTE rows exist only for cells whose first backward re-computes
  # (backward_kinds.EARLY_RECOMPUTE); the other passes have a row for every cell, and a missing one
  # fails here.
  cells = [k for k in range(plan.num_cells) if (kind, k) in state.times] if kind == timeline.RECOMPUTE else range(
      plan.num_cells)
  if cells:
    recorder.Add(name, kind, [devices[k] for k in cells], [state.times[(kind, k)].stack() for k in cells], plan,
                 cells)


def _Moments(state):
  return {path: part for per_cell in state.moments.values() for path, part in per_cell.items()}


def _InputGrads(state, like, wanted):
  """Per-leaf TensorArrays of the first cell's input gradients (None for leaves without: non-float, not wanted)."""
  arrays = iter(state.input_grads.get(0, []))
  flat = tf.nest.flatten(like)
  return [next(arrays) if w else None for w in remat.WantsGrad(flat, wanted)]


def Forward(facts, cells, micro, stacked, recorder=None, name=''):
  """Runs the forward phase of facts.plan (step_facts.StepFacts). `micro`: the micro-batches, a
  list; `stacked`: the same as microbatch.Stacked gives them (needed where facts.loops says the
  phase loops). Returns a ForwardResult. With a timeline.Recorder, every action's timestamps are
  added to it as pipeline `name`'s forward pass."""
  inputs = phase_loop.MicroBatches(micro, stacked, cells.devices[0])
  plan = facts.plan
  run = _Interpreter(facts, cells, inputs=inputs, recording=recorder is not None)
  state = phase_loop.RunPhase(plan, plan_lib.FORWARD, run, EmptyState(), facts.loops[plan_lib.FORWARD],
                              run.Invariant())
  _Record(recorder, name, timeline.FORWARD, cells.devices, state, plan)
  with tf.device(cells.devices[-1]):  # Stacked where they were written: no copy.
    outputs = tf.nest.pack_sequence_as(run.kept.like['out'],
                                       [a.stack() for a in state.outputs[plan.num_cells - 1]])
  return ForwardResult(outputs, _Moments(state), run.kept._replace(stash=state.stash, last=dict(state.last),
                                                                     saved=state.saved))


def Backward(facts, cells, dy_micro, dy_stacked, kept, recorder=None, name=''):
  """Runs the backward phase of facts.plan. `dy_micro` and `dy_stacked`: the gradients of the last
  cell's outputs, as `micro` and `stacked` of Forward.

  Returns (per-leaf TensorArrays of the first cell's input gradients (None for non-float leaves),
  {cell: its parameter gradients summed over the micro-batches}). With a timeline.Recorder, every
  action's timestamps are added to it as pipeline `name`'s backward pass.
  """
  upstreams = phase_loop.MicroBatches(dy_micro, dy_stacked, cells.devices[-1])
  plan = facts.plan
  run = _Interpreter(facts, cells, upstreams=upstreams, kept=kept, recording=recorder is not None)
  # Each device's first backward waits for its last forward (a re-computation may start before its
  # gradient).
  start = EmptyState()._replace(last=dict(kept.last or {}), saved=dict(kept.saved or {}))
  # The backward pass's loop captures the parameters as they are: packed there too
  # (phase_loop.Invariant), the peak memory rose, for reasons not yet understood
  # (docs/notes/code-measurements.md).
  state = phase_loop.RunPhase(plan, plan_lib.BACKWARD, run, start, facts.loops[plan_lib.BACKWARD])
  _Record(recorder, name, timeline.BACKWARD, cells.devices, state, plan)
  _Record(recorder, name, timeline.RECOMPUTE, cells.devices, state, plan)
  return _InputGrads(state, kept.like[0], cells.wanted), state.accumulated


def Step(facts, cells, micro, loss, recorder=None, name=''):
  """Runs facts.plan, whose one phase interleaves forwards and backwards (schedule.NEEDS_LOSS).
  loss(m, outputs) runs on the last cell's device right after its forward of micro-batch m and
  returns the gradient of m's share of the loss w.r.t. those outputs, which starts m's backward.
  Returns (input gradient TensorArrays as Backward's, {cell: parameter gradients summed over the
  micro-batches}, {layer path: moments.Moments}). Unrolled: the graph grows with M."""
  inputs = phase_loop.MicroBatches(micro, None, cells.devices[0])
  plan = facts.plan
  run = _Interpreter(facts, cells, inputs=inputs, loss=loss, recording=recorder is not None)
  state = phase_loop.RunPhase(plan, plan_lib.STEP, run, EmptyState(), facts.loops[plan_lib.STEP])
  _Record(recorder, name, timeline.FORWARD, cells.devices, state, plan)
  _Record(recorder, name, timeline.BACKWARD, cells.devices, state, plan)
  _Record(recorder, name, timeline.RECOMPUTE, cells.devices, state, plan)
  if plan.splits_backward:
    _Record(recorder, name, timeline.WEIGHT, cells.devices, state, plan)
  return _InputGrads(state, run.kept.like[0], cells.wanted), state.accumulated, _Moments(state)
