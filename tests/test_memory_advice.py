"""process_memory.Advice: what the planner says fits, said when a process ran out of memory, never names the
configuration that ran, and raises its predictions by as much as they were short where it said that one fits."""

import re

import pytest

from lingpipe.runners import process_memory
from lingpipe.runners import run_params

_MIB = 2**20


@pytest.fixture
def calibrated(monkeypatch):
  """This machine's processes as a fixed model: 300 MiB beyond 1.1x the allocator's peak."""
  model = process_memory.ProcessModel(300 * _MIB, 1.1)
  monkeypatch.setattr(process_memory, 'Load', lambda: process_memory.Calibration(
      model, model, process_memory.ProcessModel(300 * _MIB, 0), 'test machine', 'today'))


def _Params(override=''):
  return run_params.BuildModelParams('synthetic.DenseStack', override='task.hidden_dim=2048;task.num_layers=12' + (
      ';' + override if override else ''))


def _Override(advice):
  return re.search(r'--model_params_override="([^"]*)"', advice).group(1)


def test_the_advice_at_a_memory_death_never_names_what_just_died(calibrated):  # pylint: disable=unused-argument
  budget = 1536 * _MIB
  first = process_memory.Advice(_Params(), budget, 2, False)
  assert first.startswith('The planner says this fits 1536 MiB a process: '), first
  # The user follows it, and it dies too: the planner was short, by budget / its predicted peak at least.
  died = _Override(first)
  second = process_memory.Advice(_Params(died), budget, 2, False)
  assert _Override(second) != died, second
  raised = re.search(r"the planner's peaks raised (\d+)%: it said (\S+) fits, at (\d+) MiB", second)
  assert raised and raised.group(2) == died, second
  assert abs(float(raised.group(1)) - 100 * (1536 / float(raised.group(3)) - 1)) <= 1, second
  # What it names fits the budget with its predictions raised so.
  assert float(re.search(r'\(predicted peak (\d+) MiB\)', second).group(1)) <= 1536, second
