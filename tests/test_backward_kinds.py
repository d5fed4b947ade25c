"""Each backward of a plan is bound once to one strategy, and each forward that keeps its activations to the
strategy its backward uses."""

from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule
from lingpipe.gpipe.engine import backward_kinds as kinds


def _Bound(plan, saves=False):
  bound = kinds.Bind(plan, saves)
  by_kind = {}
  for phase in plan.phases:
    for tick in phase.ticks:
      for a in tick:
        if a in bound:
          by_kind.setdefault((a.kind, a.cell), []).append(bound[a])
  return by_kind


def test_a_cells_first_recomputing_backward_is_the_early_one():
  bound = _Bound(schedule.MakePlan('1f1b', 4, 2, 'always'))
  # Cell 0 runs F0 F1 B0 ...: B0 re-computes, early; its later re-computing backwards are one call each.
  assert [s.name for s in bound[(plan_lib.BACKWARD, 0)]] == ['early re-compute'] + ['re-compute'] * 3
  # Cell 1 runs each backward right after its forward, which keeps its activations (KeepWhereBackwardFollows).
  assert set(bound[(plan_lib.BACKWARD, 1)]) == {kinds.STORED_TAPE}


def test_kept_activations_are_a_stack_or_a_tape_and_split_plans_split():
  never = schedule.MakePlan('gpipe', 4, 2, 'never')
  assert set(_Bound(never, saves=True)[(plan_lib.BACKWARD, 0)]) == {kinds.SAVED_STACK}
  assert set(_Bound(never, saves=True)[(plan_lib.FORWARD, 0)]) == {kinds.SAVED_STACK}
  assert set(_Bound(never)[(plan_lib.BACKWARD, 1)]) == {kinds.STORED_TAPE}
  split = _Bound(schedule.MakePlan('zero_bubble', 4, 2, 'never'))
  assert {s for (kind, _), ss in split.items() for s in ss} == {kinds.SPLIT}
  assert all(s.holds_until_weight for ss in split.values() for s in ss)
