"""memory_advice.Advice: what the planner says fits, said when a process ran out of memory, never names the
configuration that ran, and raises its predictions by as much as they were short where it said that one fits."""

import io
import os
import re

import pytest

from lingpipe.core import byte_sizes
from lingpipe.memory import calibration
from lingpipe.memory import memory_advice
from lingpipe.memory import memory_budget
from lingpipe.memory import memory_cgroup
from lingpipe.memory import memory_trials
from lingpipe.memory import process_model
from lingpipe.model import model_registry
from lingpipe.runners import run_params

_MIB = 2**20


@pytest.fixture
def calibrated(monkeypatch):
  """This machine's processes as a fixed model: 300 MiB beyond 1.1x the allocator's peak."""
  model = process_model.ProcessModel(300 * _MIB, 1.1)
  monkeypatch.setattr(process_model, 'Load', lambda parts=None: process_model.Calibration(
      model, model, process_model.ProcessModel(300 * _MIB, 0), 'test machine', 'today'))


def _Params(override="task.network.remat='never';task.network.num_micro_batches=1"):
  """Where configurations differ in memory: activations outweigh weights (in a dense stack all hold about the
  weights, so where one died at the budget the advice is more workers)."""
  return run_params.BuildModelParams('synthetic.LongSequenceTransformer', override='task.num_layers=4' + (
      ';' + override if override else ''))


def _Override(advice):
  return re.search(r'--model_params_override="([^"]*)"', advice).group(1)


def test_the_advice_at_a_memory_death_never_names_what_just_died(calibrated):  # pylint: disable=unused-argument
  budget = 1536 * _MIB
  first = memory_advice.Advice(_Params(), budget, 2, False)
  assert first.startswith('The planner says this fits 1536 MiB a process: '), first
  # The user follows it, and it dies too: the planner was short, by budget / its predicted peak at least.
  died = _Override(first)
  second = memory_advice.Advice(_Params(died), budget, 2, False)
  assert _Override(second) != died, second
  raised = re.search(r"the planner's peaks raised (\d+)%: it said (\S+) fits, at (\d+) MiB", second)
  assert raised and raised.group(2) == died, second
  assert abs(float(raised.group(1)) - 100 * (1536 / float(raised.group(3)) - 1)) <= 1, second
  # What it names fits the budget with its predictions raised so.
  assert float(re.search(r'\(predicted peak (\d+) MiB\)', second).group(1)) <= 1536, second


def test_the_advice_plan_pipeline_and_pipeline_auto_pick_alike(calibrated):  # pylint: disable=unused-argument
  """One rule (ranking.Recommend): the same margin, M among the batch's divisors, the fastest predicted that
  fits, then the least memory; here with speeds from flops (--pipeline=auto then steps the best, step_trials.py).
  The advice leaves out the configuration that ran (K=1 here, so not a candidate of K=2's)."""
  from lingpipe.core import base_layer  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.choice import auto_config  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import ranking  # pylint: disable=g-import-not-at-top
  budget = 1536 * _MIB
  p = _Params("task.network.num_splits=1;task.network.num_micro_batches=1;task.network.remat='never'")
  advice = _Override(memory_advice.Advice(p, budget, 2, False))
  model = process_model.Load().trainer
  peak_of = lambda c: max(memory_plan.ProcessPeaks(c, model, one_process=True))
  with base_layer.AbstractVariables():
    net = p.task.Instantiate().network
  layers, shapes = [unit.params for unit in net.units], net.params.input_shapes
  slots = memory_plan.OptimizerSlots(p.task.train.optimizer)
  candidates = [c for c in memory_plan.Candidates(layers, shapes, 2, memory_plan.BatchSize(shapes, 0), slots=slots,
                                                  balance='uniform') if c.num_splits == 2]
  recommended = ranking.Recommend(candidates, budget, peak_of)
  chosen = auto_config.ChooseFor(layers, shapes, 2, {'balance': 'uniform', 'num_splits': 2}, budget, peak_of,
                                 slots=slots, measure=False).chosen
  assert recommended.Override() == chosen.candidate.Override() == advice, (recommended.Override(), advice)
  assert ranking.Fits(peak_of(recommended), budget) and not ranking.Fits(budget, budget)


def test_the_process_model_is_measured_in_parts_kept_side_by_side(tmp_path, monkeypatch):
  """Local devices need the one-process model alone (two trials, not the workers' four)."""
  monkeypatch.setenv('LINGPIPE_CACHE', str(tmp_path))
  runs = []

  def Trial(model, override, workers, cap, steps, scratch=None):
    del model, cap, steps, scratch
    runs.append(workers)
    depth = int(re.search(r'num_layers=(\d+)', override).group(1))
    peaks = {'trainer': (300 + 20 * depth) * _MIB} if not workers else dict(
        {'worker %d' % i: (350 + 10 * depth) * _MIB for i in range(workers)}, trainer=(320 + depth) * _MIB)
    return memory_trials.Trial(True, peaks, 1.0, '')
  monkeypatch.setattr(memory_trials, 'Run', Trial)
  out = io.StringIO()
  local = calibration.LoadOrCalibrate(out, ('trainer',))
  assert runs == [0, 0] and local.trainer is not None and local.worker is None and 'one process; once' in out.getvalue()
  assert process_model.Load() is None and calibration.LoadOrCalibrate(out, ('trainer',)) == local
  both = calibration.LoadOrCalibrate(out)
  assert runs == [0, 0, 2, 2] and both.trainer == local.trainer and both.worker is not None


def test_a_calibration_that_measured_nothing_is_one_line_and_the_choice_goes_on(tmp_path, monkeypatch):
  """Under a budget the trials' memory was not read (their trainer stayed in the caller's cgroup and ended before
  it was sampled): a KeyError in Calibrate was the traceback of a first --pipeline=auto with --memory_limit."""
  monkeypatch.setenv('LINGPIPE_CACHE', str(tmp_path))
  monkeypatch.setattr(memory_trials, 'Run', lambda *args, **kwargs: memory_trials.Trial(
      True, {}, 1.0, 'Saved checkpoint /tmp/x/train/ckpt-6'))
  monkeypatch.setattr(memory_cgroup, 'OwnCgroup', lambda pid='self': (1, '/sys/fs/cgroup/memory'))
  monkeypatch.setattr(memory_budget, 'Limit', lambda mesh=None, device_memory=None: 3 * 2**30)
  out = io.StringIO()
  p = model_registry.GetParams('synthetic.DeepMlpGPipe', 'Train')
  budget, peak_of, what = calibration.LocalBudget(p, out=out)
  assert budget == 3 * 2**30 and peak_of is not None and what == 'allocator peak'
  lines = [line for line in out.getvalue().splitlines() if not line.startswith('Measuring what')]
  assert lines == [
      "Measuring this machine's process memory failed (nothing was kept): the trial of synthetic.DenseStack at 4 "
      'layers under %s trained, but the memory of trainer could not be read from its cgroup (its last line: Saved '
      "checkpoint /tmp/x/train/ckpt-6): the budget is compared with the devices' allocator peaks alone, which leave "
      'out what TensorFlow itself holds (a few hundred MiB).' % byte_sizes.Format(memory_trials.Cap(
          calibration._MemTotal()))], out.getvalue()  # pylint: disable=protected-access
  assert process_model.Load() is None and not os.listdir(tmp_path)
