"""Runs a schedule's Plan (schedule.py) as TensorFlow ops: the plan decides, the executor only interprets it.

Each FORWARD or BACKWARD action is one call of the cell's traced function on the cell's device, so the graph holds
calls, not copies of the cells. Each device's actions are chained in plan order: an action waits (a control
dependency) for what the device's previous action produced, its gradient sum included, so TensorFlow cannot
reorder a device's work nor run two of its backwards at once (see Backward); the only
edges between devices are the SENDs, a copy of the result onto the receiving cell's device (`HandOff`), which the
receiving action reads; the sender goes on at once. Across processes that needs workers with two inter-op threads
or more (remote.Connect asks for them): with one, a worker's received tensors wait until its current action has
ended, and a sender's results until it stops for something (remote.RequestInterOpThreads says what that cost).
A phase's steady ticks run as one loop (phase_loop.py).

A plan that splits the backward ('zero_bubble') traces its cells inline instead (Cells.body), so that a BACKWARD
can leave the weight gradients to its WEIGHT action (split_backward.py); on one device the runtime may then
interleave the ops of neighbouring actions. So do the schedules with the loss inside (1F1B, interleaved) where a
forward keeps its activations (remat 'never', the last micro-batch of 'except_last'): the gradient of a call
comes out of one call op, all of the cell's weight gradients at once beside their sum so far, while inline each
layer's gradients are added to the sum as soon as they exist (dense workload, K=2, M=8: 1F1B's peak went from
0.64x GPipe's to 0.42x).

A re-computing backward waits for its gradient, except each cell's first (`_EarlyRecompute`, traced inline): its
re-computation waits only for the device's previous action, so it runs while the device waits for its first
gradient, and only the backward is left on the critical path (dense workload, K=2, M=1, one process: 0.30 -> 0.25 s
a step, before plans kept the activations where the backward comes next, schedule.KeepWhereBackwardFollows, which
leaves this to 1F1B's warm-up and interleaved cells). Later backwards gain nothing from it (each waits for the
previous one, whose gradient came from the same neighbour) and stay one call each.

What a later action needs lives in the typed state: messages in flight, what each forward kept (cell inputs in
TensorArrays on the cell's device, tapes, or in GPipe the tensors the cell's backward reads, on a stack per cell so
that the passes loop under remat 'never' too: Cells.Saves), the last cell's outputs, the first cell's input
gradients, each cell's batch-norm moments (moments.Moments, merged over micro-batches on the cell's device) and each
cell's weight gradients, accumulated on its device.
"""

from typing import Any, Callable, Dict, List, NamedTuple

import tensorflow as tf

from lingpipe.gpipe import phase_loop
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import remat
from lingpipe.gpipe import saved_stack
from lingpipe.gpipe import split_backward
from lingpipe.gpipe import tensor_lists
from lingpipe.gpipe import timeline


class Cells(NamedTuple):
  """What the executor runs, one entry per cell (lists indexed by cell).

  forward[k](inputs, index, params) -> (outputs, {layer path: moments.Moments}[, (start, end)]);
  backward[k](inputs, upstream, index, params, accumulated) -> (input grads, accumulated + param grads[, stamps]),
  for a cell's later re-computing backwards (its first runs inline from `body`: _Interpreter._EarlyRecompute);
  taped_backward(params, inputs, upstream, tape, outputs, wanted) -> (input grads, param grads); zeros[k]() -> cell
  k's zero gradients. The [start, end] outputs exist when `stamped` (timeline.Stamped).
  body[k](inputs, index, params, recomputing) -> (outputs, moments): cell k's forward traced inline (plans that split
  the backward record it, split_backward.py; `recomputing` discards the moments).
  wanted: per leaf of cell 0's inputs, whether its gradient is computed (remat.WantedInputGrads; None: every float
  leaf). backward[0] must compute the same ones. Later cells compute every float input gradient: the previous
  cell needs them.
  saving[k]: cell_gradient.CellGradient of forward[k]: forwards that keep their activations return them as data
  (SavingForward) where the plan allows it (Saves), so that they can loop.
  """
  devices: List[str]
  params: List[List[tf.Tensor]]
  forward: List[Callable]
  backward: List[Callable] = None
  taped_backward: Callable = None
  body: List[Callable] = None
  wanted: List[bool] = None
  saving: List[Any] = None

  def Saves(self, plan, loss=None):
    """Whether the forwards of `plan` that keep their activations return them as data (SavingForward) instead of
    keeping them on a tape, which cannot outlive a loop iteration: with `saving`, in a plan whose loss comes after
    the forward pass (GPipe), that does not split the backward, and whose backwards use each cell's kept
    activations last in, first out, so that they can be kept on a stack (saved_stack.py)."""
    return (self.saving is not None and loss is None and not plan.splits_backward
            and all(saved_stack.LastInFirstOut(plan, k) for k in range(plan.num_cells)))

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
  accumulated: Dict  # {cell: [parameter gradients summed so far]}
  input_grads: Dict  # {0: [TensorArray per float input leaf]}
  times: Dict  # {(kind, cell): TensorArray of (micro-batch, start, end)} while recording
  saved: Dict  # {cell: {dtype name: TensorList}}: the tensors its looped saving forwards keep, a stack per dtype


def _EmptyState():
  return State(*[{} for _ in State._fields])


class Kept(NamedTuple):
  """What the forward pass leaves for the backward."""
  inputs: Any  # MicroBatches: cell 0's inputs
  stash: Dict  # State.stash
  tapes: Dict  # {(micro-batch, cell): (inputs, outputs, GradientTape)} of KEEP_ACTIVATIONS forwards; with
  # Cells.Saves, the list of tensors an unrolled one saved for its backward
  like: Dict  # {cell: the structure of its inputs, 'out': that of the last cell's outputs}
  last: Dict = None  # {device: what its last forward produced}: the backward phase starts there (State.last)
  saved: Dict = None  # State.saved at the end of the forward pass


class ForwardResult(NamedTuple):
  outputs: Any  # the last cell's outputs, stacked: [M, micro-batch ...] leaves
  moments: Dict  # {layer path: moments.Moments} of the whole mini-batch
  kept: Kept




def HandOff(structure, device):
  """`structure` copied onto `device` (a SEND)."""
  with tf.device(device):
    return tf.nest.map_structure(lambda t: None if t is None else tf.identity(t), structure)


def CutFromCallerTapes(inputs, params, devices):
  """(inputs, params) as a pipeline's custom gradient hands them to the executor: the same values, no longer
  watched by the caller's tapes (its gradients come from the custom gradient, never through the body). The
  executor's own tapes watch them explicitly; were a caller's tape watching too, TensorFlow would treat each taped
  cell call as possibly higher-order and build the cell's gradient functions three times instead of once
  (AmoebaNet-D(6, 32) at K=2: 14 s of a 15 s trace before, measured). Each cut runs where its tensors live:
  the inputs on cell 0's device (devices[0]), cell k's parameters (params[k]) on cell k's; unplaced, a cut was put
  elsewhere and each step copied the parameters there and back (two worker processes: 18 ms before cell 1's first
  forward, measured)."""
  def Cut(structure, device):
    with tf.device(device):
      return tf.nest.map_structure(tf.stop_gradient, structure)
  return Cut(inputs, devices[0]), [Cut(p, d) for p, d in zip(params, devices)]


def _Watch(tape, cell_in, params, wanted):
  """Inside `with tape:`, what a taped cell differentiates against: its inputs whose gradients are `wanted`
  (remat.WantsGrad) and its parameter values."""
  flat = tf.nest.flatten(cell_in)
  tape.watch([x for x, w in zip(flat, remat.WantsGrad(flat, wanted)) if w])
  tape.watch(params)


def _Write(arrays, m, structure, num_micro, device):
  """TensorArrays (one per leaf of `structure`, created on `device` on the first write) with `structure` at m."""
  leaves = tf.nest.flatten(structure)
  with tf.device(device):
    if arrays is None:
      arrays = [tf.TensorArray(t.dtype, size=num_micro, element_shape=t.shape) for t in leaves]
    written = [a.write(m, t) for a, t in zip(arrays, leaves)]
  for a in written:  # A pass that is never differentiated leaves its stash unread, by design.
    getattr(a, 'mark_used', lambda: None)()  # Only graph-mode arrays are wrapped by tf_should_use.
  return written


def _Read(arrays, m, like, device):
  with tf.device(device):
    return tf.nest.pack_sequence_as(like, [a.read(m) for a in arrays])


class _Interpreter:
  """Runs one action of a plan on a State: the FORWARD, BACKWARD and SEND of every phase and schedule."""

  def __init__(self, plan, cells, inputs=None, upstreams=None, kept=None, loss=None, recording=False, loop=True):
    self.plan, self.cells, self.inputs, self.upstreams, self.loss = plan, cells, inputs, upstreams, loss
    self.kept = kept or Kept(inputs, {}, {}, {})
    self.recording = recording
    # While recording a plan whose actions are traced inline, the runtime interleaves the ops of a device's
    # neighbouring actions (a W with the next F), so their stamps overlapped and ran late: there, the device's next
    # action also waits for the previous one's end stamp, and each box is one action alone on its device. Hand-offs
    # do not wait for it. The price is what that interleaving gained (pipeline_timeline.py prints the recorded
    # step's time beside the plain one's).
    self.serialize = recording and (plan.splits_backward or loss is not None)
    self.ends = {}  # {device: the end stamp of its last externally timed action}, while serializing
    self.dy = {}  # {micro-batch: gradient of its loss share w.r.t. the last cell's outputs} (with a loss)
    # An unrolled phase with a loss (1F1B) keeps cell inputs as tensors, freed once their backward read them (a
    # TensorArray frees nothing until the step ends, which kept all M micro-batches' inputs alive).
    self.kept_inputs = {}
    self.split = plan.splits_backward
    self.saves = cells.Saves(plan, loss)
    self.pushed = {k: saved_stack.Pushed(plan, k, loop) for k in range(plan.num_cells)} if self.saves else None
    self.pending = {}  # {(micro-batch, cell): split_backward.Pending} between a split BACKWARD and its WEIGHT
    # {device: cell}: the device's last action was a BACKWARD or WEIGHT of that cell, and its next action also waits
    # for the cell's gradient sum (_Last). Not in state.last: a loop carries each tensor of its state as one loop
    # variable, the same tensor twice as two, each lowered to five control-flow nodes (12-layer Transformer, K=4:
    # 144 more in the backward pass's loop). As the steady ticks repeat one pattern, a device's last action has the
    # same kind and cell before the loop and at the end of its body.
    self.sums_of = {}

  def __call__(self, a, m, state):
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

  def _Last(self, state, device):
    """What the device's next action waits for: what its last action produced, its gradient sum included."""
    k = self.sums_of.get(device)
    return list(state.last.get(device, [])) + (list(state.accumulated[k]) if k is not None else [])

  def _Run(self, state, action, m, device, waits_for, call, stamped, kind=None):
    """call(), its (start, end) written to state.times[(kind, cell)] (rows of (m, start, end) on `device`) while
    recording: `stamped` calls return their own stamps as a last output (timeline.Stamped), others are stamped
    from outside (timeline.Timed, which waits for `waits_for`). `kind` (default: the action's) RECOMPUTE: the early
    re-computation of a cell's first backward, one row per cell. Where a plan traces actions inline (a split
    backward, the loss inside), the device's next action also waits for this one's end stamp (see __call__)."""
    if not self.recording:
      return call()
    if stamped:
      *outputs, stamps = call()
      outputs = tuple(outputs)
    else:  # The start waits for the action's inputs and for the device's previous action.
      outputs, stamps = timeline.Timed(device, [waits_for, self._Last(state, action.device)], call)
      if self.serialize:
        self.ends[action.device] = stamps[1]
      stamps = tf.stack(stamps)
    key = (kind or action.kind, action.cell)
    num_micro = self.plan.num_micro_batches
    rows, row = (1, 0) if kind == timeline.RECOMPUTE else (num_micro, m)
    with tf.device(device):
      array = state.times.get(key) or tf.TensorArray(tf.float64, size=rows, element_shape=[3])
      state.times[key] = array.write(row, tf.concat([[tf.cast(m, tf.float64)], stamps], 0))
    return outputs

  def Send(self, a, state):
    sent = HandOff(state.produced.pop(a.cell), self.cells.devices[a.to_cell])
    if a.to_cell < a.cell:  # Gradients: None (of a non-float leaf) cannot be loop state; the rest go by index.
      sent = {i: g for i, g in enumerate(sent) if g is not None}
    key = (a.cell, a.to_cell)
    state.mail[key] = state.mail.get(key, ()) + (sent,)
    return state  # The device's next action waits for the sending action (state.last), not for the copy.

  def _MicroBatch(self, micro_batches, a, m, state):
    """micro_batches.At(m) (phase_loop.MicroBatches) for action `a`. In a loop it is a gather, a copy, made once the
    device's previous action is done: else the loop's iterations ran ahead and made every iteration's copy at its
    start (dense stack, K=2, M=8, remat 'always': peak 90 MiB against 79 unrolled)."""
    if isinstance(m, int):  # A micro-batch of the list: no op.
      return micro_batches.At(m)
    with tf.control_dependencies(self._Last(state, a.device)):
      return micro_batches.At(m)

  @staticmethod
  def _Receive(state, key):
    first, *rest = state.mail.pop(key)
    if rest:
      state.mail[key] = tuple(rest)
    return first

  def Forward(self, a, m, state):
    cells, k, num_micro = self.cells, a.cell, self.plan.num_micro_batches
    device, like, tapes = cells.devices[k], self.kept.like, self.kept.tapes
    cell_in = self._MicroBatch(self.inputs, a, m, state) if k == 0 else self._Receive(state, (k - 1, k))
    like.setdefault(k, cell_in)
    call = lambda: cells.forward[k](cell_in, phase_loop.Index(m), cells.params[k])
    with tf.device(device), tf.control_dependencies(self._Last(state, a.device)):
      if a.keep == plan_lib.KEEP_ACTIVATIONS and self.split:
        def Recorded():
          recorded = split_backward.Record(lambda x, params: cells.body[k](x, phase_loop.Index(m), params, False),
                                           cell_in, cells.params[k], cells.Wanted(k))
          tapes[(m, k)] = recorded[2]
          return recorded[:2]
        cell_out, moments = self._Run(state, a, m, device, cell_in, Recorded, False)
      elif a.keep == plan_lib.KEEP_ACTIVATIONS and self.saves:
        saved = []

        def Saving():
          outputs, tensors = cells.saving[k].SavingForward(cell_in, phase_loop.Index(m), cells.params[k])
          saved.extend(tensors)
          return outputs
        cell_out, moments = self._Run(state, a, m, device, cell_in, Saving, True)
        # Pushed on the cell's stack, or kept by micro-batch (saved_stack.Pushed). Every loop variable needs a value
        # before the loop: the stacks are created by the unrolled tick before it, which runs every action of the body.
        push = not isinstance(m, int) or m in self.pushed[k]
        if push or self.pushed[k]:
          varying = cells.saving[k].Varying(cell_in, cells.params[k], saved)
          state.saved[k] = tensor_lists.Push(state.saved.get(k), varying, device, push)
        if not push:
          tapes[(m, k)] = saved
      elif a.keep == plan_lib.KEEP_ACTIVATIONS:
        inline = self.loss is not None and cells.body is not None
        if inline:  # The weight gradients are summed layer by layer (see the module docstring).
          call = lambda: cells.body[k](cell_in, phase_loop.Index(m), cells.params[k], False)
        tape = tf.GradientTape(watch_accessed_variables=False)
        with tape:
          _Watch(tape, cell_in, cells.params[k], cells.Wanted(k))
          cell_out, moments = self._Run(state, a, m, device, cell_in, call, not inline)
        tapes[(m, k)] = (cell_in, cell_out, tape)
      else:
        cell_out, moments = self._Run(state, a, m, device, cell_in, call, True)
    if a.keep == plan_lib.KEEP_INPUT and k > 0:  # Cell 0's inputs are the micro-batches, kept anyway.
      if self.loss is not None:
        self.kept_inputs[(m, k)] = cell_in
      else:
        state.stash[k] = _Write(state.stash.get(k), m, cell_in, num_micro, device)
    if k < self.plan.num_cells - 1:
      state.produced[k] = cell_out
    elif self.loss is not None:
      with tf.device(device):
        self.dy[m] = self.loss(m, cell_out)
    else:
      like['out'] = cell_out  # Only its structure is used.
      state.outputs[k] = _Write(state.outputs.get(k), m, cell_out, num_micro, device)
    state.last[a.device] = tf.nest.flatten(cell_out)
    self.sums_of.pop(a.device, None)
    with tf.device(device):
      merged = state.moments.get(k, {})
      state.moments[k] = {path: merged[path].Merge(part) if path in merged else part
                          for path, part in moments.items()}
    return state

  def Backward(self, a, m, state):
    cells, k, num_micro, kept = self.cells, a.cell, self.plan.num_micro_batches, self.kept
    device = cells.devices[k]
    if a.recompute:
      if k == 0:
        cell_in = self._MicroBatch(kept.inputs, a, m, state)
      elif self.loss is not None:  # Kept in this phase (1F1B, unrolled: m is an int).
        cell_in = self.kept_inputs.pop((m, k))
      else:  # Stashed by the forward phase (GPipe).
        cell_in = _Read(kept.stash[k], m, kept.like[k], device)
    elif self.split:
      recorded = kept.tapes.pop((m, k))
    elif self.saves:
      saving = cells.saving[k]
      if isinstance(m, int) and m not in self.pushed[k]:
        saved = kept.tapes.pop((m, k))
      else:
        specs = saving.VaryingSpecs(kept.like[k], cells.params[k])
        state.saved[k], varying = tensor_lists.Pop(state.saved[k], specs, device)
        with tf.device(device):
          saved = saving.Restore(kept.like[k], cells.params[k], varying)
    else:
      cell_in, cell_out, tape = kept.tapes.pop((m, k))
    if k < self.plan.num_cells - 1:
      received = self._Receive(state, (k + 1, k))
      flat = tf.nest.flatten(kept.like[k + 1])
      upstream = tf.nest.pack_sequence_as(kept.like[k + 1], [received.get(i) for i in range(len(flat))])
    else:
      upstream = self.dy.pop(m) if self.loss is not None else self._MicroBatch(self.upstreams, a, m, state)
    if self.split:
      return self._InputGradients(a, m, state, cell_in if a.recompute else None, upstream,
                                  None if a.recompute else recorded)
    with tf.device(device), tf.control_dependencies(self._Last(state, a.device)):
      # A cell's first backward starts the sum with its own gradients (no zeros to add them to: one weights-sized
      # fill and add fewer per cell and step).
      acc = state.accumulated.get(k)
      if a.recompute and acc is None:
        in_grads, state.accumulated[k] = self._EarlyRecompute(a, m, state, cell_in, upstream)
      else:
        if a.recompute:
          call = lambda: cells.backward[k](cell_in, upstream, phase_loop.Index(m), cells.params[k], acc)
        elif self.saves:
          def call():
            in_grads, param_grads = cells.saving[k].SavedBackward(kept.like[k], phase_loop.Index(m), cells.params[k],
                                                                  saved, upstream, cells.Wanted(k))
            return in_grads, remat.AddGrads(acc, param_grads)
          cell_in = saved  # What the backward waits for (_Run).
        else:
          def call():
            in_grads, param_grads = cells.taped_backward(cells.params[k], cell_in, upstream, tape, cell_out,
                                                         cells.Wanted(k))
            return in_grads, remat.AddGrads(acc, param_grads)
        in_grads, state.accumulated[k] = self._Run(state, a, m, device, [cell_in, upstream, acc or []], call,
                                                   a.recompute)
    # The device's next action waits for the input gradients and the sum. Waiting for the input gradients alone,
    # GPipe's next backward ran beside this one's weight gradients (graph function calls are inlined): three
    # backwards at once on cell 1 of the conv workload, and 1.17x the planned peak of the dense workload (K=2, M=8,
    # remat never; 136 MiB chained against 149, at the same speed). Waiting for nothing but the sum, grappler
    # rewrites the chain of adds into one AddN, which keeps every micro-batch's gradients alive until the last.
    # The price is on one device with idle threads (K=1, M=4, one process: 0.57 -> 0.47 of the plain model).
    floats = [g for g in in_grads if g is not None]
    state.last[a.device] = floats
    self.sums_of[a.device] = k
    if k > 0:
      state.produced[k] = in_grads
    else:
      state.input_grads[0] = _Write(state.input_grads.get(0), m, floats, num_micro, device)
    return state

  def _EarlyRecompute(self, a, m, state, cell_in, upstream):
    """A cell's first re-computing backward, traced inline: (input grads, param grads). Its re-computation waits
    for the device's previous action (the caller's control dependencies), not for the gradient, so it runs while
    the device waits for its first gradient (1F1B's warm-up): that backward costs only its backward on the
    critical path. Only the first backward gains: the later ones of a device wait for its previous backward, whose
    gradient came from the same neighbour, and stay one call each (remat.AccumulatingBackward), which keeps the
    graph small. At most one micro-batch's re-computed activations per device are alive, as before: the device's
    next action waits for this one."""
    cells, k = self.cells, a.cell
    device = cells.devices[k]
    tape = tf.GradientTape(watch_accessed_variables=False)

    def Recompute():
      with tape:
        _Watch(tape, cell_in, cells.params[k], cells.Wanted(k))
        return cells.body[k](cell_in, phase_loop.Index(m), cells.params[k], True)[0]

    cell_out = self._Run(state, a, m, device, cell_in, Recompute, False, kind=timeline.RECOMPUTE)
    recomputed = state.times[(timeline.RECOMPUTE, k)].flow if self.recording else []  # Its end stamp, written.

    def Backward():
      in_grads, param_grads = cells.taped_backward(cells.params[k], cell_in, upstream, tape, cell_out,
                                                   cells.Wanted(k))
      return in_grads, remat.AddGrads(None, param_grads)

    return self._Run(state, a, m, device, [upstream, cell_out, recomputed], Backward, False)

  def _InputGradients(self, a, m, state, cell_in, upstream, recorded):
    """A split BACKWARD: the input gradients (re-computing the forward from `cell_in`, or from the forward's
    `recorded` tapes); what the weight gradients need waits for the WEIGHT action."""
    cells, k = self.cells, a.cell
    device = cells.devices[k]
    with tf.device(device), tf.control_dependencies(self._Last(state, a.device)):
      def Call():
        nonlocal recorded
        if recorded is None:
          gated = remat.AfterGradient(cell_in, upstream)  # Re-compute once the gradient has arrived.
          recorded = split_backward.Record(lambda x, params: cells.body[k](x, phase_loop.Index(m), params, True),
                                           gated, cells.params[k], cells.Wanted(k))[2]
        in_grads, self.pending[(m, k)] = split_backward.InputGrads(recorded, upstream)
        return in_grads
      in_grads = self._Run(state, a, m, device, [cell_in, upstream], Call, False)
    floats = [g for g in in_grads if g is not None]
    if k > 0:
      state.produced[k] = in_grads
    else:
      state.input_grads[0] = _Write(state.input_grads.get(0), m, floats, self.plan.num_micro_batches, device)
    # The device's next action waits for all B computed: its input gradients, and (cell 0's inputs may have none,
    # e.g. token ids) the activation gradients it leaves for W.
    pending = self.pending[(m, k)]
    self.sums_of.pop(a.device, None)
    state.last[a.device] = floats + [g for grads in pending.read_grads if grads for g in grads if g is not None] + [
        g for g in pending.swept if g is not None]
    return state

  def Weight(self, a, m, state):
    """A WEIGHT action: the deferred weight gradients of micro-batch m's split BACKWARD, added to the sum."""
    k, device = a.cell, self.cells.devices[a.cell]
    pending = self.pending.pop((m, k))
    with tf.device(device), tf.control_dependencies(self._Last(state, a.device)):
      acc = state.accumulated.get(k)

      def Call():
        grads = split_backward.WeightGrads(pending)
        return remat.AddGrads(acc, grads)
      state.accumulated[k] = list(self._Run(state, a, m, device, acc or [], Call, False))
    state.last[a.device] = []
    self.sums_of[a.device] = k
    return state


def _Record(recorder, name, kind, devices, state, plan):
  if recorder is None:
    return
  # RECOMPUTE rows exist only for cells whose first backward re-computes (_EarlyRecompute); the other passes
  # have a row for every cell, and a missing one fails here.
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


def Forward(plan, cells, micro, stacked, recorder=None, name='', loop=True):
  """Runs the plan's forward phase. `micro`: the micro-batches, a list; `stacked`: the same as microbatch.Stacked
  gives them (needed when Loops says the phase loops). Returns a ForwardResult. With a timeline.Recorder, every
  action's timestamps are added to it as pipeline `name`'s forward pass."""
  inputs = phase_loop.MicroBatches(micro, stacked, cells.devices[0])
  run = _Interpreter(plan, cells, inputs=inputs, recording=recorder is not None, loop=loop)
  state = phase_loop.RunPhase(plan, plan_lib.FORWARD, run, _EmptyState(), loop, run.saves, run.Invariant())
  _Record(recorder, name, timeline.FORWARD, cells.devices, state, plan)
  with tf.device(cells.devices[-1]):  # Stacked where they were written: no copy.
    outputs = tf.nest.pack_sequence_as(run.kept.like['out'],
                                       [a.stack() for a in state.outputs[plan.num_cells - 1]])
  return ForwardResult(outputs, _Moments(state), run.kept._replace(stash=state.stash, last=dict(state.last),
                                                                     saved=state.saved))


def Backward(plan, cells, dy_micro, dy_stacked, kept, recorder=None, name='', loop=True):
  """Runs the plan's backward phase. `dy_micro` and `dy_stacked`: the gradients of the last cell's outputs, as
  `micro` and `stacked` of Forward.

  Returns (per-leaf TensorArrays of the first cell's input gradients (None for non-float leaves), {cell: its
  parameter gradients summed over the micro-batches}). With a timeline.Recorder, every action's timestamps are
  added to it as pipeline `name`'s backward pass.
  """
  upstreams = phase_loop.MicroBatches(dy_micro, dy_stacked, cells.devices[-1])
  run = _Interpreter(plan, cells, upstreams=upstreams, kept=kept, recording=recorder is not None, loop=loop)
  # Each device's first backward waits for its last forward (a re-computation may start before its gradient).
  start = _EmptyState()._replace(last=dict(kept.last or {}), saved=dict(kept.saved or {}))
  # The backward pass's loop captures the parameters as they are. Packed there too (phase_loop.Invariant), the dense
  # workload's peak rose (K=2, M=8, remat 'always': medians 91 against 82 MiB, six alternating runs each), even
  # with the packed parameters carried but not read; in a TensorArray, 85 against 82 (eight and five runs), within
  # the noise or not. Not understood yet; the forward pass's loop packed measured 81-82.
  state = phase_loop.RunPhase(plan, plan_lib.BACKWARD, run, start, loop, run.saves)
  _Record(recorder, name, timeline.BACKWARD, cells.devices, state, plan)
  _Record(recorder, name, timeline.RECOMPUTE, cells.devices, state, plan)
  return _InputGrads(state, kept.like[0], cells.wanted), state.accumulated


def Step(plan, cells, micro, loss, recorder=None, name=''):
  """Runs a plan whose one phase interleaves forwards and backwards (schedule.NEEDS_LOSS). loss(m, outputs) runs
  on the last cell's device right after its forward of micro-batch m and returns the gradient of m's share of
  the loss w.r.t. those outputs, which starts m's backward. Returns (input gradient TensorArrays as Backward's,
  {cell: parameter gradients summed over the micro-batches}, {layer path: moments.Moments}). Unrolled: the
  graph grows with M."""
  inputs = phase_loop.MicroBatches(micro, None, cells.devices[0])
  run = _Interpreter(plan, cells, inputs=inputs, loss=loss, recording=recorder is not None)
  state = phase_loop.RunPhase(plan, plan_lib.STEP, run, _EmptyState(), loop=False)
  _Record(recorder, name, timeline.FORWARD, cells.devices, state, plan)
  _Record(recorder, name, timeline.BACKWARD, cells.devices, state, plan)
  _Record(recorder, name, timeline.RECOMPUTE, cells.devices, state, plan)
  if plan.splits_backward:
    _Record(recorder, name, timeline.WEIGHT, cells.devices, state, plan)
  return _InputGrads(state, run.kept.like[0], cells.wanted), state.accumulated, _Moments(state)
