"""A pipeline step as data: a Plan lists, for each device, the actions it runs, in order (schedule.py makes them).

Actions (`Action`): FORWARD of micro-batch m through cell k; BACKWARD of it, which either
re-computes the cell's forward from its stored input (re-materialization, `recompute=True`) or uses
the activations its forward kept; WEIGHT, in plans that split the backward ('zero_bubble'): the
weight gradients of a BACKWARD that computed only the input gradients, deferred into what would be
bubbles; and SEND of cell k's result for m to the device of the cell that needs it next (activations
to cell k+1 in the forward, input gradients to cell k-1 in the backward). A receive is not an
action: the receiving action reads the message, and that copy onto its device is the only edge
between devices (executor.py).

A plan's phases are the TensorFlow calls of a step (the forward pass and the backward pass; one STEP
where the loss is inside the pipeline), each a list of clock ticks that order the building of the
graph. A plan also says what each forward keeps for the backward (`keep`): nothing (evaluation), the
cell's input (re-computing backward), or its activations (taped backward). `Check` proves a plan
consistent before any TensorFlow runs it.
"""

from typing import NamedTuple, Tuple

from lingpipe.core import errors

FORWARD, BACKWARD, WEIGHT, SEND, STEP = 'forward', 'backward', 'weight', 'send', 'step'
KEEP_NOTHING, KEEP_INPUT, KEEP_ACTIVATIONS = 'nothing', 'input', 'activations'


class Action(NamedTuple):
  """One thing one device does. For SEND, `cell` is the sender and `to_cell` the cell whose device receives."""
  kind: str
  micro_batch: int
  cell: int
  device: int
  keep: str = KEEP_NOTHING  # FORWARD: what it keeps for the backward.
  recompute: bool = False  # BACKWARD: re-compute the forward from the kept input (else use kept activations).
  to_cell: int = -1  # SEND only.

  def Shifted(self, delta):
    """The same action for micro-batch micro_batch + delta."""
    return self._replace(micro_batch=self.micro_batch + delta)

  def __str__(self):
    if self.kind == SEND:
      return 'S%d:%d>%d' % (self.micro_batch, self.cell, self.to_cell)
    return '%s%d' % (self.kind[0].upper(), self.micro_batch)


class Phase(NamedTuple):
  """Part of a step run as one TensorFlow call: the forward pass, or the backward pass. `ticks[t]`
  lists the actions of tick t in build order: every action reads its message before the sender of
  the next one writes it."""
  name: str
  ticks: Tuple[Tuple[Action, ...], ...]


class Plan(NamedTuple):
  schedule: str
  num_micro_batches: int
  num_cells: int
  num_devices: int
  remat: str  # None for a forward-only (evaluation) plan.
  phases: Tuple[Phase, ...]

  @property
  def splits_backward(self):
    """Whether BACKWARD computes only input gradients, and WEIGHT actions the weight gradients."""
    return any(a.kind == WEIGHT for phase in self.phases for tick in phase.ticks for a in tick)

  def Phase(self, name):
    for phase in self.phases:
      if phase.name == name:
        return phase
    raise errors.ConfigError('Plan %r has no phase %r; it has %s.' % (
        self.schedule, name, ', '.join(p.name for p in self.phases)))

  def DeviceActions(self, device, phase=None):
    """The actions of `device` in the order it runs them (in one phase, or in all)."""
    phases = self.phases if phase is None else [self.Phase(phase)]
    return [a for p in phases for tick in p.ticks for a in tick if a.device == device]

  def ComputeOrder(self, phase):
    """(micro_batch, cell) of the phase's FORWARD or BACKWARD actions, in build order."""
    return [(a.micro_batch, a.cell) for tick in self.Phase(phase).ticks for a in tick if a.kind != SEND]

  def _Name(self, action):
    """Fm/Bm; with more cells than devices Fm:c, c the cell."""
    return str(action) if self.num_cells == self.num_devices else '%s:%d' % (action, action.cell)

  def Diagram(self):
    """The plan drawn as in this module's docstring, one block per phase."""
    lines = []
    for phase in self.phases:
      width = max([len(self._Name(a)) for tick in phase.ticks for a in tick if a.kind != SEND] + [2]) + 2
      lines.append('%s (%d ticks)' % (phase.name, len(phase.ticks)))
      for d in range(self.num_devices):
        cells = []
        for tick in phase.ticks:
          names = [self._Name(a) for a in tick if a.device == d and a.kind != SEND]
          cells.append((names[0] if names else '.').ljust(width))
        lines.append(('dev %d  ' % d) + ''.join(cells).rstrip())
    return '\n'.join(lines)

def Needs(kind, micro_batch, cell, num_cells):
  """The compute actions (kind, micro-batch, cell) whose results the action reads: a forward, the
  previous cell's forward; a backward, its own forward and the next cell's backward; a weight
  action, its backward."""
  if kind == FORWARD:
    return [(FORWARD, micro_batch, cell - 1)] if cell > 0 else []
  if kind == WEIGHT:
    return [(BACKWARD, micro_batch, cell)]
  return [(FORWARD, micro_batch, cell)] + ([(BACKWARD, micro_batch, cell + 1)] if cell + 1 < num_cells else [])


def Check(plan):
  """Raises ConfigError unless `plan` is runnable: every forward and (when training) backward of
  every (micro-batch, cell) once (and, in a plan that splits the backward, its weight gradients
  once, after it); one compute action per device per tick; a cell's forward reads the message its
  predecessor sent for the same micro-batch (the backward's, its successor's), messages on a channel
  read in the order sent; every result a later cell needs is sent; a backward after its forward,
  using what the forward kept."""
  def Fail(why):
    raise errors.ConfigError('Schedule %r is inconsistent (M=%d, K=%d): %s' % (
        plan.schedule, plan.num_micro_batches, plan.num_cells, why))

  num_micro, num_cells = plan.num_micro_batches, plan.num_cells
  forwarded, backwarded, weighted, device_of = {}, set(), set(), {}
  for phase in plan.phases:
    mail, produced = {}, {}
    for t, tick in enumerate(phase.ticks):
      busy = [a.device for a in tick if a.kind != SEND]
      if len(busy) != len(set(busy)):
        Fail('tick %d gives one device two tasks: %s' % (t, ' '.join(map(str, tick))))
      for a in tick:
        task = (a.micro_batch, a.cell)
        if not (0 <= a.micro_batch < num_micro and 0 <= a.cell < num_cells and 0 <= a.device < plan.num_devices):
          Fail('%s names a micro-batch, cell or device out of range' % (a,))
        if device_of.setdefault(a.cell, a.device) != a.device:
          Fail('cell %d runs on devices %d and %d' % (a.cell, device_of[a.cell], a.device))
        if a.kind == SEND:
          if produced.get(a.cell) != a.micro_batch:
            Fail('tick %d sends %s before cell %d produced it' % (t, a, a.cell))
          mail.setdefault((a.cell, a.to_cell), []).append(a.micro_batch)  # Read in the order sent.
          del produced[a.cell]
          continue
        if a.kind == WEIGHT:
          if task not in backwarded or task in weighted:
            Fail('weight gradients %s run before its backward or twice' % (task,))
          weighted.add(task)
          continue
        if a.kind == FORWARD:
          sender, last = a.cell - 1, a.cell == num_cells - 1
          if task in forwarded:
            Fail('forward %s runs twice' % (task,))
          forwarded[task] = a.keep
        else:
          sender, last = a.cell + 1, a.cell == 0
          if task not in forwarded or task in backwarded:
            Fail('backward %s runs before its forward or twice' % (task,))
          if a.recompute != (forwarded[task] == KEEP_INPUT) or forwarded[task] == KEEP_NOTHING:
            Fail('backward %s (recompute=%s) does not match what its forward kept (%s)' % (
                task, a.recompute, forwarded[task]))
          backwarded.add(task)
        if 0 <= sender < num_cells:
          queue = mail.get((sender, a.cell)) or [None]
          if queue.pop(0) != a.micro_batch:
            Fail('tick %d: %s %s finds no message from cell %d for its micro-batch' % (t, a.kind, task, sender))
          if not queue:
            mail.pop((sender, a.cell), None)
        if not last:
          if a.cell in produced:
            Fail('cell %d produced micro-batch %d before sending micro-batch %d' % (
                a.cell, a.micro_batch, produced[a.cell]))
          produced[a.cell] = a.micro_batch
    if mail or produced:
      Fail('phase %s ends with results never sent or read: %s' % (phase.name, sorted(mail) + sorted(produced)))
  everything = {(m, k) for m in range(num_micro) for k in range(num_cells)}
  if set(forwarded) != everything or (plan.remat is not None and backwarded != everything):
    Fail('not every (micro-batch, cell) runs forward%s' % (' and backward' if plan.remat else ''))
  if weighted and weighted != everything:
    Fail('the backward is split, but not every (micro-batch, cell) computes its weight gradients')
