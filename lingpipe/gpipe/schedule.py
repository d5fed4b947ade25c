"""Pipeline schedules: pure functions giving the order of (micro-batch, cell) tasks per clock tick.

GPipe's fill-drain schedule with M micro-batches and K cells runs task (m, k) (micro-batch m through cell k) at
clock tick m + k. For M=4, K=3 the forward pass is

    tick:     0      1      2      3      4      5
    cell 0  (0,0)  (1,0)  (2,0)  (3,0)
    cell 1         (0,1)  (1,1)  (2,1)  (3,1)
    cell 2                (0,2)  (1,2)  (2,2)  (3,2)

and the backward pass is the same diagram read from right to left, cell K-1 first. Each cell is idle for K-1 of
the M+K-1 ticks of each pass: the bubble, (K-1)/(M+K-1) of the time, which is small when M >= 4K.

From tick K-1 to tick M-1 every cell is busy (the steady ticks); the executor (executor.py) runs those as one loop.
"""

from lingpipe.core import errors

SCHEDULES = ('gpipe',)


def _Check(num_micro_batches, num_cells):
  if num_micro_batches < 1 or num_cells < 1:
    raise errors.ConfigError('A schedule needs num_micro_batches >= 1 and num_cells >= 1, got %d and %d.' % (
        num_micro_batches, num_cells))


def ClockCycles(num_micro_batches, num_cells):
  """Forward ticks of the fill-drain schedule: a list of M+K-1 lists of (micro_batch, cell) run in parallel."""
  _Check(num_micro_batches, num_cells)
  return [_Tasks(t, num_micro_batches, num_cells) for t in range(num_micro_batches + num_cells - 1)]


def _Tasks(tick, num_micro_batches, num_cells, backward=False):
  """The (micro_batch, cell) tasks of an int tick, by increasing cell."""
  tasks = [(MicroBatchAt(tick, k, num_micro_batches, num_cells, backward), k) for k in range(num_cells)]
  return [(m, k) for m, k in tasks if m is not None]


def MicroBatchAt(tick, cell, num_micro_batches, num_cells, backward=False):
  """The micro-batch cell `cell` works on at `tick` (an int, or a scalar tensor inside a loop); with ints, None
  when the cell is idle. Backward tick s runs forward tick M+K-2-s."""
  m = (num_micro_batches + num_cells - 2 - tick - cell) if backward else tick - cell
  if isinstance(m, int) and not 0 <= m < num_micro_batches:
    return None
  return m


def ForwardOrder(num_micro_batches, num_cells, schedule='gpipe'):
  """(micro_batch, cell) forward tasks in an order that respects every dependency of `schedule`."""
  if schedule not in SCHEDULES:
    raise errors.ConfigError('Unknown schedule %r; expected one of %s.%s' % (
        schedule, ', '.join(SCHEDULES), errors.DidYouMean(schedule, SCHEDULES)))
  return [task for tick in ClockCycles(num_micro_batches, num_cells) for task in tick]


def BackwardOrder(num_micro_batches, num_cells, schedule='gpipe'):
  """(micro_batch, cell) backward tasks: the forward ticks in reverse (the executor's backward ticks)."""
  ForwardOrder(num_micro_batches, num_cells, schedule)
  return [task for s in range(num_micro_batches + num_cells - 1)
          for task in _Tasks(s, num_micro_batches, num_cells, backward=True)]


def BubbleFraction(num_micro_batches, num_cells):
  """Fraction of each device's time spent idle: (K-1)/(M+K-1)."""
  _Check(num_micro_batches, num_cells)
  return (num_cells - 1) / (num_micro_batches + num_cells - 1)


def IdealSpeedup(num_micro_batches, num_cells):
  """Speed-up over one device if the cells are balanced and communication is free: K*M/(M+K-1)."""
  _Check(num_micro_batches, num_cells)
  return num_cells * num_micro_batches / (num_micro_batches + num_cells - 1)
