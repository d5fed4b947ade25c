"""Pipeline schedules: each is a function returning the Plan (plan.py) of one training or evaluation step.

GPipe's fill-drain schedule ('gpipe'), M=4 micro-batches through K=3 cells, cell k on device k; Fm
is the forward and Bm the backward of micro-batch m, each column a clock tick:

    forward pass                               backward pass
    tick    0   1   2   3   4   5              0   1   2   3   4   5
    dev 0   F0  F1  F2  F3  .   .              .   .   B3  B2  B1  B0
    dev 1   .   F0  F1  F2  F3  .              .   B3  B2  B1  B0  .
    dev 2   .   .   F0  F1  F2  F3             B3  B2  B1  B0  .   .

Forward task (m, k) runs at tick m + k and backward task (m, k) at tick M+K-2-m-k. Each device idles
K-1 of the M+K-1 ticks of each pass: the bubble, (K-1)/(M+K-1), small when M >= 4K. From tick K-1 to
M-1 every device is busy and each tick is the previous one with every micro-batch one higher: the
executor runs those ticks as one loop (phase_loop.SteadyTicks), so the graph does not grow with M.

'1f1b', 'interleaved_1f1b' and 'zero_bubble' compute the loss inside the pipeline and interleave
forwards and backwards in one phase (their functions below draw them); 'zero_bubble' splits each
backward into BACKWARD and WEIGHT actions (split_backward.py).

Each forward keeps for the backward what the re-materialization policy asks (`remat`); where a
device runs a micro-batch's backward right after its forward, it keeps the activations instead
(`KeepWhereBackwardFollows`). A new schedule is a new function here returning a Plan; `MakePlan`
checks it (plan.Check) before any TensorFlow runs it.
"""

from lingpipe.core import errors
from lingpipe.gpipe.plan import Action, Check, Needs, Phase, Plan
from lingpipe.gpipe.plan import BACKWARD, FORWARD, KEEP_ACTIVATIONS, KEEP_INPUT, KEEP_NOTHING, SEND, STEP, WEIGHT

SCHEDULES = ('gpipe', '1f1b', 'interleaved_1f1b', 'zero_bubble')
# Schedules that run backwards before all forwards: the loss is computed inside the pipeline.
NEEDS_LOSS = ('1f1b', 'interleaved_1f1b', 'zero_bubble')
REMAT_POLICIES = ('always', 'except_last', 'never', 'per_layer')
# Policies whose forwards keep, per micro-batch, what the cell's backward reads (the plan's KEEP_ACTIVATIONS). Under
# 'per_layer' that is each layer's input alone: the backward re-computes one layer at a time (layer_remat.py).
KEEPS_ALL = ('never', 'per_layer')


def _CheckSizes(num_micro_batches, num_cells):
  if num_micro_batches < 1 or num_cells < 1:
    raise errors.ConfigError('A schedule needs num_micro_batches >= 1 and num_cells >= 1, got %d and %d.' % (
        num_micro_batches, num_cells))


def CheckScheduleName(schedule):
  if schedule not in SCHEDULES:
    raise errors.ConfigError('Unknown schedule %r; expected one of %s.%s' % (
        schedule, ', '.join(SCHEDULES), errors.DidYouMean(str(schedule), SCHEDULES)))


def MakePlan(schedule, num_micro_batches, num_cells, remat=None, num_devices=None):
  """The Plan of `schedule` for M micro-batches through C cells on `num_devices` devices K (default
  C: one cell per device; 'interleaved_1f1b' takes any K that divides C, cell c on device c mod K);
  `remat` (a policy of REMAT_POLICIES) gives a training plan, None a forward-only plan."""
  CheckScheduleName(schedule)
  _CheckSizes(num_micro_batches, num_cells)
  num_devices = num_cells if num_devices is None else num_devices
  if remat is not None and remat not in REMAT_POLICIES:
    raise errors.ConfigError('Unknown remat policy %r; expected one of %s.%s' % (
        remat, ', '.join(REMAT_POLICIES), errors.DidYouMean(str(remat), REMAT_POLICIES)))
  if schedule == 'interleaved_1f1b':
    if num_devices < 1 or num_cells % num_devices:
      raise errors.ConfigError('Schedule interleaved_1f1b places %d cells on %d devices: the number of cells must '
                               'be a multiple of the number of devices (virtual_stages cells each).' % (
                                   num_cells, num_devices))
    plan = _Interleaved(num_micro_batches, num_cells, num_devices, remat)
  elif num_devices != num_cells:
    raise errors.ConfigError('Schedule %r runs one cell per device, got %d cells on %d devices; more cells than '
                             'devices need schedule=\'interleaved_1f1b\'.' % (schedule, num_cells, num_devices))
  elif schedule == '1f1b' and remat is not None:
    plan = _OneFOneB(num_micro_batches, num_cells, remat)
  elif schedule == 'zero_bubble' and remat is not None:
    plan = _ZeroBubble(num_micro_batches, num_cells, remat)
  else:  # GPipe; and the evaluation of 1F1B and zero bubble, a forward pass in fill-drain's order.
    plan = _FillDrain(num_micro_batches, num_cells, remat)
  plan = KeepWhereBackwardFollows(plan)
  Check(plan)
  return plan


def KeepWhereBackwardFollows(plan):
  """`plan` with each forward that its device follows directly with that micro-batch's backward
  keeping its activations instead of re-computing them: the backward's re-computation would bring
  back the same activations at once (nothing else runs on the device in between), so keeping them
  costs no memory at the device's peak and saves a forward. It is each cell's last forward in GPipe
  (remat 'always' then runs as 'except_last'; at M=1, K=2, F0 F1 R1 B1 R0 B0 becomes F0 F1 B1 B0)
  and every forward of the last cell in 1F1B and zero bubble."""
  sequences = {}
  for p, phase in enumerate(plan.phases):
    for t, tick in enumerate(phase.ticks):
      for i, a in enumerate(tick):
        if a.kind != SEND:
          sequences.setdefault(a.device, []).append((p, t, i, a))
  replaced = {}
  for sequence in sequences.values():
    for (p, t, i, a), (q, u, j, b) in zip(sequence, sequence[1:]):
      if (a.kind == FORWARD and a.keep == KEEP_INPUT and b.kind == BACKWARD and b.recompute
          and (b.micro_batch, b.cell) == (a.micro_batch, a.cell)):
        replaced[(p, t, i)] = a._replace(keep=KEEP_ACTIVATIONS)
        replaced[(q, u, j)] = b._replace(recompute=False)
  if not replaced:
    return plan
  phases = tuple(phase._replace(ticks=tuple(tuple(replaced.get((p, t, i), a) for i, a in enumerate(tick))
                                             for t, tick in enumerate(phase.ticks)))
                 for p, phase in enumerate(plan.phases))
  return plan._replace(phases=phases)


def _Stores(remat, m, num_micro_batches):
  """Whether (remat policy) the forward of micro-batch m keeps its activations for the backward."""
  return remat in KEEPS_ALL or (remat == 'except_last' and m == num_micro_batches - 1)


def _FillDrain(num_micro, num_cells, remat):
  """GPipe: all forwards (task (m, k) at tick m + k), then all backwards in reverse (see the docstring)."""
  num_ticks = num_micro + num_cells - 1
  forward = []
  for t in range(num_ticks):
    tick = []
    for k in reversed(range(num_cells)):  # Cell k reads cell k-1's message before cell k-1 sends the next.
      m = t - k
      if not 0 <= m < num_micro:
        continue
      keep = KEEP_NOTHING if remat is None else (
          KEEP_ACTIVATIONS if _Stores(remat, m, num_micro) else KEEP_INPUT)
      tick.append(Action(FORWARD, m, k, k, keep=keep))
      if k + 1 < num_cells:
        tick.append(Action(SEND, m, k, k, to_cell=k + 1))
    forward.append(tuple(tick))
  phases = [Phase(FORWARD, tuple(forward))]
  if remat is not None:
    backward = []
    for s in range(num_ticks):
      tick = []
      for k in range(num_cells):  # Cell k reads cell k+1's gradients before cell k+1 sends the next.
        m = num_micro + num_cells - 2 - s - k
        if not 0 <= m < num_micro:
          continue
        tick.append(Action(BACKWARD, m, k, k, recompute=not _Stores(remat, m, num_micro)))
        if k > 0:
          tick.append(Action(SEND, m, k, k, to_cell=k - 1))
      backward.append(tuple(tick))
    phases.append(Phase(BACKWARD, tuple(backward)))
  return Plan('gpipe', num_micro, num_cells, num_cells, remat, tuple(phases))


def _OneFOneB(num_micro, num_cells, remat):
  """1F1B (PipeDream-Flush): stage k runs min(K-1-k, M) forwards, then alternates one forward and
  one backward, then the remaining backwards; the last cell's forward computes the loss, so
  micro-batch m's backward starts as soon as its forward ends. At most K-k micro-batches are in
  flight on stage k (GPipe: all M). One phase, STEP; an action runs at the first tick after
  everything it needs ran. M=4, K=3:

      tick    0   1   2   3   4   5   6   7   8   9   10  11
      dev 0   F0  F1  F2  .   .   B0  F3  B1  .   B2  .   B3
      dev 1   .   F0  F1  .   B0  F2  B1  F3  B2  .   B3  .
      dev 2   .   .   F0  B0  F1  B1  F2  B2  F3  B3  .   .

  (Ticks order the building of the graph; each device then runs its actions in this order as soon as
  their inputs exist, a backward taking about twice a forward's time.)
  """
  # It is interleaved 1F1B with one cell per device: K-1-k warm-up forwards, then micro-batches in
  # order.
  return _Interleaved(num_micro, num_cells, num_cells, remat, '1f1b')


def _ZeroBubble(num_micro, num_cells, remat):
  """Zero bubble, ZB-H1 (Qi et al. 2023): the backward of a cell is split into the input gradients
  (B, on the critical path: the previous cell waits for them) and the weight gradients (W, which
  nothing waits for), and the W actions fill what would be 1F1B's bubbles. Each device runs,
  whenever it is free, the first of: a backward whose inputs exist, the next forward (unless K
  micro-batches would then wait for their W, 1F1B's peak), a pending W; with F, B and W taking one
  time unit each. M=4, K=2:

      tick    0   1   2   3   4   5   6   7   8   9   10  11  12
      dev 0   F0  F1  .   B0  W0  B1  F2  W1  F3  B2  W2  B3  W3
      dev 1   .   F0  B0  F1  B1  W0  W1  F2  B2  F3  B3  W2  W3

  13 time units instead of 1F1B's 15: the bubble is (K-1)/(3M+K-1) for K=2 and even M (for larger K,
  or odd M, this greedy order is a unit or two per device longer), against 1F1B's (K-1)/(M+K-1). As
  in 1F1B, the last cell computes the loss, and a micro-batch's activations live from its forward to
  its W.
  """
  orders, end = [[] for _ in range(num_cells)], {}
  free, next_forward, in_flight = [0] * num_cells, [0] * num_cells, [0] * num_cells
  pending = [[] for _ in range(num_cells)]
  t, left = 0, 3 * num_micro * num_cells
  while left:
    for d in range(num_cells):
      if free[d] > t:
        continue
      ready = lambda *task: end.get(task, t + 1) <= t
      action = next(((BACKWARD, m) for m in range(next_forward[d]) if (BACKWARD, m, d) not in end
                     and ready(FORWARD, m, d) and (d == num_cells - 1 or ready(BACKWARD, m, d + 1))), None)
      m = next_forward[d]
      if action is None and m < num_micro and in_flight[d] < num_cells and (d == 0 or ready(FORWARD, m, d - 1)):
        action = (FORWARD, m)
      if action is None and pending[d]:
        action = (WEIGHT, pending[d][0])
      if action is None:
        continue
      kind, m = action
      end[(kind, m, d)] = free[d] = t + 1
      orders[d].append((kind, m, d))
      left -= 1
      if kind == FORWARD:
        next_forward[d] += 1
        in_flight[d] += 1
      elif kind == BACKWARD:
        pending[d].append(m)
      else:
        pending[d].pop(0)
        in_flight[d] -= 1
    t += 1
  return _ListTicks('zero_bubble', orders, num_micro, num_cells, remat)


def _Interleaved(num_micro, num_cells, num_devices, remat, name='interleaved_1f1b'):
  """Interleaved 1F1B (Narayanan et al. 2021): v = C/K cells per device, cell c on device c mod K,
  so each device holds v thin stages spread along the pipeline, and a micro-batch crosses the K
  devices v times. Device d runs its forwards in groups of K micro-batches: the group through its
  first cell (d), then through its second (d + K), ...; its backwards likewise, last cell first;
  after 2(K-1-d) + (v-1)K warm-up forwards (see below) it alternates one forward and one backward,
  as 1F1B does. The fill and drain are v times shorter, so with M a multiple of K the bubble is
  (K-1)/(vM+K-1) instead of (K-1)/(M+K-1), for vK-1 hand-offs per micro-batch and pass (not K-1).
  M=4, K=2, v=2 (cells 0 and 2 on device 0, cells 1 and 3 on device 1; Fm:c is the forward of
  micro-batch m through cell c):

      tick    0     1     2     3     4     5     6     7     8     9     10    11    12    13    14    15    16
      dev 0   F0:0  F1:0  F0:2  F1:2  F2:0  B0:2  F3:0  B1:2  F2:2  B0:0  F3:2  B1:0  .     B2:2  .     B3:2  B2:0 ..
      dev 1   .     F0:1  F1:1  F0:3  B0:3  F1:3  B1:3  F2:1  B0:1  F3:1  B1:1  F2:3  B2:3  F3:3  B3:3  B2:1  B3:1

  (device 0 ends with B3:0 at tick 17.) Megatron-LM warms up with 2(K-1-d) + (v-1)K forwards: each
  hand-off then has a forward's time to arrive before it is needed, which matters across processes,
  where hand-offs cost. It costs device d K-1-d more micro-batches in flight, and with free
  hand-offs (Simulate) it deadlocks for some M not divisible by K (M=5, K=4, v=3) and has a larger
  bubble for many K > 2. So the plan takes Megatron's warm-up where it exists and its simulated
  bubble is no larger (every M at K=2), the shorter one elsewhere. Neither ever had a larger bubble
  than 1F1B for M <= 32, K <= 6, v <= 4; for M a multiple of K the bubble is the formula's.

  With `remat` None (evaluation), device d runs the same forwards and no backward.
  """
  groups = [range(g, min(g + num_devices, num_micro)) for g in range(0, num_micro, num_devices)]
  virtual = num_cells // num_devices
  forwards, backwards = [], []
  for d in range(num_devices):
    chunks = [c * num_devices + d for c in range(virtual)]
    forwards.append([(FORWARD, m, c) for g in groups for c in chunks for m in g])
    backwards.append([(BACKWARD, m, c) for g in groups for c in reversed(chunks) for m in g])
  if remat is None:
    return _ListTicks(name, forwards, num_micro, num_cells, remat)

  def Warmed(extra):  # The plan with device d warming up with extra * (K-1-d) more forwards.
    warm = [min((1 + extra) * (num_devices - 1 - d) + (virtual - 1) * num_devices, len(forwards[d]))
            for d in range(num_devices)]
    return _ListTicks(name, [_OneForwardOneBackward(f, b, w) for f, b, w in zip(forwards, backwards, warm)],
                      num_micro, num_cells, remat)

  short = Warmed(0)
  if virtual == 1:
    return short
  try:
    longer = Warmed(1)
  except errors.ConfigError:  # Deadlocks (M=5, K=4, v=3).
    return short
  return longer if Bubble(longer) <= Bubble(short) + 1e-9 else short


def _OneForwardOneBackward(forwards, backwards, warm):
  """`warm` forwards, then one forward and one backward in turn, then the remaining backwards."""
  order = forwards[:warm]
  for i in range(len(forwards) - warm):
    order += [forwards[warm + i], backwards[i]]
  return order + backwards[len(forwards) - warm:]



def _ListTicks(name, orders, num_micro, num_cells, remat):
  """The Plan of devices running their `orders` (orders[d]: (kind, micro-batch, cell) in device d's
  order): at each tick every device runs its next action if everything that action needs ran at an
  earlier tick. One phase: STEP when training (forwards and backwards interleaved: the loss is
  computed inside), FORWARD for evaluation."""
  done, ticks, position = {}, [], [0] * len(orders)
  while any(position[d] < len(order) for d, order in enumerate(orders)):
    t, tick = len(ticks), []
    for d in reversed(range(len(orders))):
      if position[d] == len(orders[d]):
        continue
      kind, m, k = orders[d][position[d]]
      if any(done.get(n, t) >= t for n in Needs(kind, m, k, num_cells)):
        continue
      position[d] += 1
      done[(kind, m, k)] = t
      stores = _Stores(remat, m, num_micro)
      if kind == FORWARD:
        keep = KEEP_NOTHING if remat is None else KEEP_ACTIVATIONS if stores else KEEP_INPUT
        tick.append(Action(FORWARD, m, k, d, keep=keep))
        if k + 1 < num_cells:
          tick.append(Action(SEND, m, k, d, to_cell=k + 1))
      elif kind == WEIGHT:
        tick.append(Action(WEIGHT, m, k, d))
      else:
        tick.append(Action(BACKWARD, m, k, d, recompute=not stores))
        if k > 0:
          tick.append(Action(SEND, m, k, d, to_cell=k - 1))
    if not tick:
      raise errors.ConfigError('Schedule %r deadlocks at tick %d (M=%d, %d cells on %d devices): no device can '
                               'run its next action.' % (name, t, num_micro, num_cells, len(orders)))
    ticks.append(tuple(tick))
  phase = Phase(FORWARD if remat is None else STEP, tuple(ticks))
  return Plan(name, num_micro, num_cells, len(orders), remat, (phase,))


def Simulate(plan, backward_cost=2.0, costs=None, action_cost=None):
  """The plan run with a forward taking 1 time unit and a backward `backward_cost` (about 2: the
  gradients of the inputs and of the weights; half each where the plan splits them into BACKWARD and
  WEIGHT), hand-offs free, each device running its actions in plan order as soon as their inputs
  exist, and a phase starting when the previous one ended. `costs`, {(kind, cell): time} for the
  kinds FORWARD, BACKWARD and WEIGHT the plan runs (e.g. timeline.ActionTimes of a measured step),
  replaces those units: unequal cells and a backward that is not twice a forward change the bubble.
  `action_cost`, a function of an Action returning its time, replaces both (step_time.py: a
  backward's time depends on whether it re-computes). Returns (the step's length, the fraction of it
  the devices are idle on average: the schedule's bubble)."""
  end, now, busy = {}, 0.0, [0.0] * plan.num_devices
  units = {FORWARD: 1.0, BACKWARD: backward_cost, WEIGHT: 0.0}
  if plan.splits_backward:
    units[BACKWARD] = units[WEIGHT] = backward_cost / 2

  def Cost(a):
    if action_cost is not None:
      return action_cost(a)
    if costs is None:
      return units[a.kind]
    if (a.kind, a.cell) not in costs:
      raise errors.ConfigError('Simulate got no time for %s of cell %d (costs has %s).' % (
          a.kind, a.cell, ', '.join('%s of cell %d' % key for key in sorted(costs))))
    return costs[(a.kind, a.cell)]

  for phase in plan.phases:
    free = [now] * plan.num_devices
    for tick in phase.ticks:  # A tick's actions need only earlier ticks' results.
      for a in tick:
        if a.kind == SEND:
          continue
        m, k = a.micro_batch, a.cell
        cost = Cost(a)
        start = max([free[a.device]] + [end[n] for n in Needs(a.kind, m, k, plan.num_cells)])
        end[(a.kind, m, k)] = free[a.device] = start + cost
        busy[a.device] += cost
    now = max(free)
  if not now:  # Nothing takes any time.
    return 0.0, 0.0
  return now, 1.0 - sum(busy) / (plan.num_devices * now)


def Bubble(plan):
  """The idle fraction of `plan` (Simulate); fill-drain and 1F1B: (K-1)/(M+K-1); interleaved 1F1B
  with M a multiple of K: (K-1)/(vM+K-1)."""
  return Simulate(plan)[1]


def BubbleFraction(num_micro_batches, num_cells):
  """Fraction of each device's time spent idle in fill-drain: (K-1)/(M+K-1)."""
  _CheckSizes(num_micro_batches, num_cells)
  return (num_cells - 1) / (num_micro_batches + num_cells - 1)


def IdealSpeedup(num_micro_batches, num_cells):
  """Speed-up over one device if the cells are balanced and communication is free: K*M/(M+K-1)."""
  _CheckSizes(num_micro_batches, num_cells)
  return num_cells * num_micro_batches / (num_micro_batches + num_cells - 1)
