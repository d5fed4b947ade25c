"""The planner's step time of a pipeline configuration, from measured layer times and this machine's own costs.

Each action of the schedule's plan takes its cell's measured layer times at the micro-batch's size:
a forward its forwards, a backward its backwards plus the forward again where the plan re-computes
(a device that runs a micro-batch's backward right after its forward keeps the activations instead),
and a split backward its backwards times this machine's measured cost of splitting. Every action
also pays a fixed cost per call. The plan is run by schedule.Simulate, and the devices together
cannot go faster than their measured concurrency: logical CPU devices share the machine's cores.
What is measured (gpipe/choice/step_trials.MeasureTerms, each time the trainer chooses, on its own devices):
  concurrency      the throughput of K devices each running the same work at once, over one device's
  split_backward   what splitting a backward in two (zero bubble) adds to it, with the model's heaviest layer
  per_action       seconds a cell's forward or backward costs beyond its layers' times
  handoff          seconds, and seconds a byte, a cell's result costs to hand to the next cell's device
                   (worker processes copy it through gRPC; logical devices of one process about nothing),
                   added to the action that sends it
The last three are measured with real pipelines and copies.
"""

from typing import NamedTuple, Sequence, Tuple

from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule as schedule_lib


class Terms(NamedTuple):
  """This machine's costs beyond the layers' own times."""
  concurrency: Tuple[float, ...]  # [K-1]: throughput of K devices at once, in one device's
  split_backward: float = 0.0  # extra fraction of a backward when split into BACKWARD and WEIGHT
  per_action: float = 0.0  # seconds a cell call costs
  handoff: float = 0.0  # seconds a hand-off to another device costs, whatever its size
  handoff_per_byte: float = 0.0  # and a byte of it

  def Concurrency(self, num_devices):
    if num_devices <= len(self.concurrency):
      return self.concurrency[num_devices - 1]
    return float(num_devices)


IDEAL = Terms(concurrency=())  # devices that run in parallel at full speed; nothing else costs


def Predict(plan, forward, backward, terms=IDEAL, handoff_bytes=None) -> float:
  """Seconds of a training step of `plan`, given each cell's measured forward and backward seconds
  at one micro-batch (`forward[c]`, `backward[c]`: its layers' times added up) and the bytes of each
  cell's result at one micro-batch (`handoff_bytes[c]`; the gradient it receives back is as large)."""
  split = 1.0 + terms.split_backward if plan.splits_backward else 1.0
  if not (terms.handoff or terms.handoff_per_byte):
    handoff_bytes = None  # Free hand-offs (flops, or nothing measured): no cell's device to look up.
  device = {} if handoff_bytes is None else {
      a.cell: a.device for phase in plan.phases for tick in phase.ticks for a in tick}

  def Handoff(cell, to_cell):
    if handoff_bytes is None or not 0 <= to_cell < plan.num_cells or device[to_cell] == device[cell]:
      return 0.0
    return terms.handoff + terms.handoff_per_byte * handoff_bytes[min(cell, to_cell)]

  def Cost(a):
    k = a.cell
    if a.kind == plan_lib.FORWARD:
      cost = forward[k] + Handoff(k, k + 1)
    elif a.kind == plan_lib.BACKWARD:
      cost = (backward[k] * split / 2 if plan.splits_backward else backward[k]) + (
          forward[k] if a.recompute or plan.remat == 'per_layer' else 0.0) + Handoff(k, k - 1)
    else:  # WEIGHT
      cost = backward[k] * split / 2
    return cost + terms.per_action

  length, idle = schedule_lib.Simulate(plan, action_cost=Cost)
  busy = (1.0 - idle) * plan.num_devices * length  # every device's time, added up
  return max(length, busy / terms.Concurrency(plan.num_devices))


def CellTimes(counts: Sequence[int], forward, backward) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
  """(forward, backward) of each cell of `counts` layers: the layers' `forward` and `backward` added up."""
  cells_forward, cells_backward, lo = [], [], 0
  for c in counts:
    cells_forward.append(sum(forward[lo:lo + c]))
    cells_backward.append(sum(backward[lo:lo + c]))
    lo += c
  return tuple(cells_forward), tuple(cells_backward)


def Describe(terms) -> str:
  """'2 devices at once do 1.73x the work of one alone (2.00x: no sharing); a split backward costs 9% more; a cell
  call 1.0 ms[; a hand-off 0.20 ms + 1.50 ms a MiB]'."""
  parts = ['%d devices at once do %.2fx the work of one alone (%.2fx: no sharing)' % (k + 1, c, k + 1)
           for k, c in enumerate(terms.concurrency) if k]
  parts.append('a split backward costs %.0f%% more' % (100 * terms.split_backward))
  parts.append('a cell call %.1f ms' % (1000 * terms.per_action))
  if terms.handoff or terms.handoff_per_byte:
    parts.append('a hand-off %.2f ms + %.2f ms a MiB' % (1000 * terms.handoff, 1000 * 2**20 * terms.handoff_per_byte))
  return '; '.join(parts)
