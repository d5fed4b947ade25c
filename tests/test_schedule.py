"""Schedules as data: the fill-drain plan, its consistency check, its steady ticks, bubble and ideal speed-up, and
what a looped pass under remat 'never' keeps on a stack."""

import pytest

from lingpipe.core import errors
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule
from lingpipe.gpipe.engine import phase_loop
from lingpipe.gpipe.engine import saved_stack
from lingpipe.gpipe.plan import Action


def test_the_plan_matches_the_docstring_diagram():
  plan = schedule.MakePlan('gpipe', 4, 3, remat='always')
  assert plan.Diagram() == '\n'.join([
      'forward (6 ticks)',
      'dev 0  F0  F1  F2  F3  .   .',
      'dev 1  .   F0  F1  F2  F3  .',
      'dev 2  .   .   F0  F1  F2  F3',
      'backward (6 ticks)',
      'dev 0  .   .   B3  B2  B1  B0',
      'dev 1  .   B3  B2  B1  B0  .',
      'dev 2  B3  B2  B1  B0  .   .'])
  # Device 1's own order: each forward followed by the send of its result to device 2, then the backwards.
  assert [str(a) for a in plan.DeviceActions(1)] == [
      'F0', 'S0:1>2', 'F1', 'S1:1>2', 'F2', 'S2:1>2', 'F3', 'S3:1>2',
      'B3', 'S3:1>0', 'B2', 'S2:1>0', 'B1', 'S1:1>0', 'B0', 'S0:1>0']


@pytest.mark.parametrize('m,k', [(1, 1), (1, 4), (4, 1), (3, 2), (8, 4), (2, 5)])
def test_compute_orders_respect_dependencies_and_cover_every_task(m, k):
  plan = schedule.MakePlan('gpipe', m, k, remat='always')
  forward, backward = plan.ComputeOrder('forward'), plan.ComputeOrder('backward')
  everything = {(i, j) for i in range(m) for j in range(k)}
  assert set(forward) == everything == set(backward) and len(forward) == len(backward) == m * k
  pos = {t: i for i, t in enumerate(forward)}
  assert all(pos[(i, j - 1)] < pos[(i, j)] for i, j in everything if j > 0)
  assert all(pos[(i - 1, j)] < pos[(i, j)] for i, j in everything if i > 0)  # One device runs in order.
  pos = {t: i for i, t in enumerate(backward)}
  assert all(pos[(i, j + 1)] < pos[(i, j)] for i, j in everything if j < k - 1)


def test_remat_policy_decides_what_each_forward_keeps():
  def Kept(remat):
    plan = schedule.MakePlan('gpipe', 3, 2, remat=remat)
    forward = [a for tick in plan.Phase('forward').ticks for a in tick if a.kind == 'forward']
    backward = [a for tick in plan.Phase('backward').ticks for a in tick if a.kind == 'backward']
    return {(a.micro_batch, a.cell): a.keep for a in forward}, {(a.micro_batch, a.cell): a.recompute
                                                                 for a in backward}
  keep, recompute = Kept('always')
  # All but each cell's last forward, which its device follows directly with that backward: re-computing it there
  # would bring back the same activations at once (KeepWhereBackwardFollows). In GPipe, as 'except_last'.
  assert [t for t, what in keep.items() if what == 'activations'] == [(2, 0), (2, 1)]
  assert [t for t, again in recompute.items() if not again] == [(2, 1), (2, 0)]
  keep, recompute = Kept('never')
  assert set(keep.values()) == {'activations'} and not any(recompute.values())
  keep, recompute = Kept('except_last')
  assert [t for t, what in keep.items() if what == 'activations'] == [(2, 0), (2, 1)]
  assert [t for t, again in recompute.items() if not again] == [(2, 1), (2, 0)]
  evaluation = schedule.MakePlan('gpipe', 3, 2)
  assert [p.name for p in evaluation.phases] == ['forward']
  assert {a.keep for tick in evaluation.phases[0].ticks for a in tick} == {'nothing'}


@pytest.mark.parametrize('m,k,remat,steady', [
    (8, 2, 'never', [(1, 8, 1), (1, 8, -1)]),  # Ticks K-1 .. M-1: every device busy.
    (8, 2, 'always', [(1, 7, 1), (2, 8, -1)]),  # Ticks K-1 .. M-2: every device busy, its last forward kept.
    (8, 4, 'except_last', [(3, 7, 1), (4, 8, -1)]),  # The last micro-batch, kept, breaks the pattern.
    (16, 3, 'always', [(2, 15, 1), (3, 16, -1)]),
    (1, 1, None, [(0, 1, 1)])])
def test_steady_ticks(m, k, remat, steady):
  plan = schedule.MakePlan('gpipe', m, k, remat=remat)
  assert [phase_loop.SteadyTicks(phase) for phase in plan.phases] == steady


def _Broken(plan, phase_index, tick_index, tick):
  phases = list(plan.phases)
  ticks = list(phases[phase_index].ticks)
  ticks[tick_index] = tuple(tick)
  phases[phase_index] = phases[phase_index]._replace(ticks=tuple(ticks))
  return plan._replace(phases=tuple(phases))


def test_check_rejects_inconsistent_plans():
  plan = schedule.MakePlan('gpipe', 2, 2, remat='always')
  plan_lib.Check(plan)
  # Tick 1 of the forward: cell 1 reads micro-batch 0, then cell 0 runs micro-batch 1 and sends it.
  tick = plan.Phase('forward').ticks[1]
  with pytest.raises(errors.ConfigError, match='before cell 0 produced it'):
    plan_lib.Check(_Broken(plan, 0, 1, tick[2:] + tick[:2]))  # The send before the forward it sends.
  with pytest.raises(errors.ConfigError, match='finds no message from cell 0'):
    plan_lib.Check(_Broken(plan, 0, 0, plan.Phase('forward').ticks[0][:1]))  # Tick 0 does not send.
  with pytest.raises(errors.ConfigError, match='never sent or read'):
    plan_lib.Check(_Broken(plan, 0, 2, ()))  # Cell 1 never runs micro-batch 1.
  with pytest.raises(errors.ConfigError, match='one device two tasks'):
    plan_lib.Check(_Broken(plan, 0, 1, tick + (Action('forward', 1, 1, 1, keep='input'),)))
  backward_tick = plan.Phase('backward').ticks[0]
  with pytest.raises(errors.ConfigError, match='does not match what its forward kept'):
    flipped = backward_tick[0]._replace(recompute=not backward_tick[0].recompute)
    plan_lib.Check(_Broken(plan, 1, 0, (flipped,) + backward_tick[1:]))


def test_bubble_and_ideal_speedup():
  assert schedule.BubbleFraction(1, 4) == pytest.approx(3 / 4)
  assert schedule.BubbleFraction(16, 4) == pytest.approx(3 / 19)
  assert schedule.IdealSpeedup(8, 2) == pytest.approx(16 / 9)
  assert schedule.IdealSpeedup(1, 4) == pytest.approx(1.0)


def test_errors():
  with pytest.raises(errors.ConfigError, match="Unknown schedule 'gpip'.*Did you mean: gpipe"):
    schedule.MakePlan('gpip', 2, 2)
  with pytest.raises(errors.ConfigError, match="Unknown remat policy 'nevr'.*Did you mean: never"):
    schedule.MakePlan('gpipe', 2, 2, remat='nevr')
  with pytest.raises(errors.ConfigError, match='num_micro_batches >= 1'):
    schedule.MakePlan('gpipe', 0, 2)


def test_interleaved_plans_spread_cells_round_robin_and_shrink_the_bubble():
  plan = schedule.MakePlan('interleaved_1f1b', 4, 4, 'always', num_devices=2)
  assert plan.Diagram().splitlines()[1].split()[2:6] == ['F0:0', 'F1:0', 'F0:2', 'F1:2']
  assert {a.cell: a.device for a in plan.DeviceActions(1)} == {1: 1, 3: 1}
  for m in range(1, 13):
    for k in range(1, 5):
      one = schedule.Bubble(schedule.MakePlan('1f1b', m, k, 'never'))
      assert one == pytest.approx(schedule.BubbleFraction(m, k))
      for v in (2, 3):  # MakePlan checks each plan; none deadlocks or does worse than 1F1B.
        bubble = schedule.Bubble(schedule.MakePlan('interleaved_1f1b', m, k * v, 'except_last', num_devices=k))
        assert bubble <= one + 1e-9
        if m % k == 0:
          assert bubble == pytest.approx((k - 1) / (v * m + k - 1))
  evaluation = schedule.MakePlan('interleaved_1f1b', 4, 4, num_devices=2)
  assert [p.name for p in evaluation.phases] == ['forward'] and schedule.Bubble(evaluation) > 0
  assert schedule.Bubble(schedule.MakePlan('gpipe', 4, 2, 'always')) == pytest.approx(1 / 5)


def test_simulate_takes_measured_action_times():
  f, b, w = plan_lib.FORWARD, plan_lib.BACKWARD, plan_lib.WEIGHT
  # Cell 1 twice as slow: device 0 waits F0 F1 . . | . . . . B1 . B0 ; span 15, busy 6 + 12 of 30.
  slow = {(f, 0): 1.0, (f, 1): 2.0, (b, 0): 2.0, (b, 1): 4.0}
  assert schedule.Simulate(schedule.MakePlan('gpipe', 2, 2, 'never'), costs=slow) == (15.0, pytest.approx(0.4))
  # Unit times give the units' answer; zero bubble's split backward takes its W from the costs.
  plan = schedule.MakePlan('zero_bubble', 4, 2, 'never')
  units = {(kind, k): 1.0 for kind in (f, b, w) for k in range(2)}
  assert schedule.Simulate(plan, costs=units) == schedule.Simulate(plan)
  with pytest.raises(errors.ConfigError, match='no time for weight of cell 0'):
    schedule.Simulate(plan, costs={key: t for key, t in units.items() if key[0] != w})


def test_cells_and_devices_must_agree():
  with pytest.raises(errors.ConfigError, match="runs one cell per device, got 4 cells on 2 devices"):
    schedule.MakePlan('gpipe', 4, 4, 'always', num_devices=2)
  with pytest.raises(errors.ConfigError, match='5 cells on 2 devices: the number of cells must be a multiple'):
    schedule.MakePlan('interleaved_1f1b', 4, 5, 'always', num_devices=2)
  plan = schedule.MakePlan('interleaved_1f1b', 2, 4, 'always', num_devices=2)
  moved = plan.phases[0].ticks[0][0]._replace(device=1)  # Cell 0's first forward on the other device.
  with pytest.raises(errors.ConfigError, match='cell 0 runs on devices 1 and 0'):
    plan_lib.Check(_Broken(plan, 0, 0, (moved,) + plan.phases[0].ticks[0][1:]))


def test_gpipe_keeps_what_its_looped_never_backwards_read_on_a_stack():
  """saved_stack.Pushed: the activations a cell keeps in the forward pass's loop, and those its backwards read in the
  backward pass's loop, go on its stack; the rest are kept by micro-batch (an unrolled push and pop is ~130 ops
  per Transformer cell). Cell 3 of 4 forwards micro-batch 0 before the loop but reads it inside the backward's."""
  plan = schedule.MakePlan('gpipe', 32, 4, 'never', 4)
  assert all(saved_stack.LastInFirstOut(plan, k) for k in range(4))
  assert saved_stack.Pushed(plan, 0) == set(range(3, 32))
  assert saved_stack.Pushed(plan, 3) == set(range(0, 29))
  assert saved_stack.Pushed(plan, 3, loop=False) == set()
  # Schedules with the loss inside run one unrolled phase and keep activations on tapes.
  for name in ('1f1b', 'interleaved_1f1b', 'zero_bubble'):
    assert not saved_stack.LastInFirstOut(schedule.MakePlan(name, 8, 2, 'never', 2), 0)
