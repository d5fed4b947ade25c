"""What one step's plan implies for the executor, derived once before anything runs and read by all:
whether kept activations are data on a stack, which ticks of each phase run as one loop, each
action's backward strategy, and which micro-batches each cell pushes on its stack. The layer reads
the loops to stack its micro-batches; the executor, phase_loop and backward_kinds read the rest."""

from typing import Dict, NamedTuple, Optional, Set, Tuple

from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe.engine import backward_kinds
from lingpipe.gpipe.engine import phase_loop
from lingpipe.gpipe.engine import saved_stack


class StepFacts(NamedTuple):
  plan: plan_lib.Plan
  saves: bool  # kept activations are data on a stack (saved_stack.py), not tapes
  loops: Dict[str, Optional[Tuple[int, int, int]]]  # {phase name: the ticks run as one loop (phase_loop.Loops)}
  strategies: Dict  # {action: its backward_kinds strategy} (backward_kinds.Bind)
  pushed: Optional[Dict[int, Set[int]]]  # {cell: micro-batches whose activations go on its stack}, where saves


def Derive(plan, saving, loop, loss=False) -> StepFacts:
  """The StepFacts of `plan`, for cells that can return kept activations as data (`saving`:
  cell_gradient's SavingForward), phases allowed to loop (`loop`: step._LoopPhases), and a
  loss inside the plan (`loss`: the schedules of schedule.NEEDS_LOSS, whose one phase runs
  unrolled).

  Kept activations are data where the loss comes after the forward pass (GPipe), the backward is not
  split, and each cell's backwards use its kept activations last in, first out: a tape cannot
  outlive a loop iteration, a stack can.
  """
  loop = loop and not loss
  saves = bool(saving) and not loss and not plan.splits_backward and all(
      saved_stack.LastInFirstOut(plan, k) for k in range(plan.num_cells))
  loops = {phase.name: phase_loop.Loops(plan, phase.name, loop, saves) for phase in plan.phases}
  pushed = {k: saved_stack.Pushed(plan, k, loop) for k in range(plan.num_cells)} if saves else None
  return StepFacts(plan, saves, loops, backward_kinds.Bind(plan, saves), pushed)
