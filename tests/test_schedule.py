"""Schedules: the fill-drain clock, its dependency order, bubble and ideal speed-up."""

import pytest

from lingpipe.core import errors
from lingpipe.gpipe import schedule


def test_clock_cycles_match_the_docstring_diagram():
  assert schedule.ClockCycles(4, 3) == [[(0, 0)], [(1, 0), (0, 1)], [(2, 0), (1, 1), (0, 2)],
                                        [(3, 0), (2, 1), (1, 2)], [(3, 1), (2, 2)], [(3, 2)]]
  assert schedule.ClockCycles(1, 1) == [[(0, 0)]]


@pytest.mark.parametrize('m,k', [(1, 1), (1, 4), (4, 1), (3, 2), (8, 4), (2, 5)])
def test_orders_respect_dependencies_and_cover_every_task(m, k):
  forward = schedule.ForwardOrder(m, k)
  backward = schedule.BackwardOrder(m, k)
  everything = {(i, j) for i in range(m) for j in range(k)}
  assert set(forward) == everything == set(backward) and len(forward) == len(backward) == m * k
  pos = {t: i for i, t in enumerate(forward)}
  assert all(pos[(i, j - 1)] < pos[(i, j)] for i, j in everything if j > 0)
  assert all(pos[(i - 1, j)] < pos[(i, j)] for i, j in everything if i > 0)  # One device runs in order.
  pos = {t: i for i, t in enumerate(backward)}
  assert all(pos[(i, j + 1)] < pos[(i, j)] for i, j in everything if j < k - 1)


def test_bubble_and_ideal_speedup():
  assert schedule.BubbleFraction(1, 4) == pytest.approx(3 / 4)
  assert schedule.BubbleFraction(16, 4) == pytest.approx(3 / 19)
  assert schedule.IdealSpeedup(8, 2) == pytest.approx(16 / 9)
  assert schedule.IdealSpeedup(1, 4) == pytest.approx(1.0)


def test_errors():
  with pytest.raises(errors.ConfigError, match="Unknown schedule 'gpip'.*Did you mean: gpipe"):
    schedule.ForwardOrder(2, 2, 'gpip')
  with pytest.raises(errors.ConfigError, match='num_micro_batches >= 1'):
    schedule.ClockCycles(0, 2)
