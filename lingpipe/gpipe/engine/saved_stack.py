"""What GPipe's forwards keep for their backward under remat 'never', as data: a stack per cell, so
that its passes loop.

A GradientTape cannot outlive a tf.while_loop iteration, so forwards that kept their activations on
one ran unrolled and the graph, and the time to the first step, grew with M. In GPipe each cell's
backwards read what its forwards kept in the reverse order (forwards 0..M-1, backwards M-1..0:
`LastInFirstOut`), so a forward in the loop pushes the tensors its backward reads
(cell_gradient.CellGradient.SavingForward) on the cell's stack, and the backward pops them and frees
them once used. A stack is one TensorList per dtype, whatever the shapes (tensor_lists.Push and
Pop): each is one loop variable, where a list per tensor would make about 90 for a cell of 4
Transformer layers, each lowered to five control-flow nodes. Forwards and backwards outside the
loops keep theirs by micro-batch instead (`Pushed`).
"""

from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe.engine import phase_loop


def _KeptOrUsed(plan, cell, phase, ticks=slice(None)):
  """The micro-batches of `cell`'s forwards that keep activations (phase FORWARD) or backwards that
  use them (BACKWARD), in plan order, in `phase`'s `ticks`."""
  return [a.micro_batch for tick in plan.Phase(phase).ticks[ticks] for a in tick
          if a.cell == cell and a.kind == phase
          and (a.keep == plan_lib.KEEP_ACTIVATIONS if phase == plan_lib.FORWARD else not a.recompute)]


def LastInFirstOut(plan, cell):
  """Whether `cell`'s backwards that use kept activations run in the reverse order of the forwards
  that kept them (GPipe: forwards 0..M-1, backwards M-1..0), in a plan with a forward and a backward
  phase."""
  names = [p.name for p in plan.phases]
  if plan_lib.FORWARD not in names or plan_lib.BACKWARD not in names:
    return False
  return _KeptOrUsed(plan, cell, plan_lib.FORWARD)[::-1] == _KeptOrUsed(plan, cell, plan_lib.BACKWARD)


def Pushed(plan, cell, loop=True):
  """The micro-batches whose activations `cell` keeps on its stack (executor.State.saved) in a plan
  that saves them (step_facts.StepFacts.saves): those of its forwards in the forward pass's loop and
  of its backwards in the backward pass's (phase_loop.Loops). The others are kept by micro-batch
  (executor.Kept.saves): a push and a pop are two ops per tensor, about 90 tensors per micro-batch
  for a cell of 4 Transformer layers. As the kept activations are used last in, first out, so are
  those of any subset of them: each pop gets what its push put."""
  pushed = set()
  for phase in (plan_lib.FORWARD, plan_lib.BACKWARD):
    looped = phase_loop.Loops(plan, phase, loop, saves=True)
    if looped is not None:
      pushed.update(_KeptOrUsed(plan, cell, phase, slice(looped[0], looped[1])))
  return pushed
