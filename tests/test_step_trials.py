"""step_trials: --pipeline=auto steps the plain model and the best predicted configurations and takes the fastest
measured, so a prediction that is wrong cannot make training slower than the plain model."""

import pytest
import tensorflow as tf

from lingpipe.gpipe.choice import auto_config
from lingpipe.gpipe.choice import step_trials
import pipeline_test_util as util

_LAYERS, _SHAPES = util.Tanh(6, 64), [24, 64]


def _Stepped(monkeypatch, seconds_of, budget=None):
  """Stepped's choice among the planner's options, with a step's seconds replaced by seconds_of(fields)."""
  stepped = []

  def Stepper(layer_params, inputs, fields, devices=None, batch_dim=0):
    del layer_params, inputs, devices, batch_dim
    stepped.append(dict(fields))
    return lambda: fields
  monkeypatch.setattr(step_trials, 'Stepper', Stepper)
  monkeypatch.setattr(step_trials, 'Seconds', lambda step, repeats=3: seconds_of(step()))
  options = auto_config.Options(_LAYERS, _SHAPES, 24, 2, {})
  choice = auto_config.Choose(options, 2, budget)
  return choice, auto_config.Stepped(choice, options, _LAYERS, _SHAPES, 'float32'), stepped


def _IsPlain(fields):
  return fields['num_splits'] == 1 and fields['num_micro_batches'] == 1 and fields['remat'] == 'never'


def test_the_plain_model_is_chosen_when_it_steps_fastest_whatever_was_predicted(monkeypatch):
  predicted, choice, stepped = _Stepped(monkeypatch, lambda f: 1.0 if _IsPlain(f) else 2.0)
  assert not _IsPlain(auto_config.Fields(predicted.chosen))  # The prediction favoured a pipeline.
  assert _IsPlain(auto_config.Fields(choice.chosen)) and choice.chosen.candidate.schedule == 'gpipe'
  assert _IsPlain(stepped[0]) and len(stepped) == 1 + step_trials.MAX_CANDIDATES
  assert auto_config.Fields(predicted.chosen) == stepped[1]  # Then the best predicted, in order.
  lines = auto_config.Report(choice)
  assert 'stepped s' in lines[0] and lines[1].split()[0] == 'chosen' and ' 1.000 ' in lines[1]
  assert any(line.startswith('(stepped here') and "plain model's 1.000 s" in line for line in lines)


def test_the_fastest_stepped_pipeline_is_chosen_and_speed_ups_are_measured(monkeypatch):
  calls = []

  def Seconds(fields):
    calls.append(fields)
    return 1.0 if _IsPlain(fields) else 0.5 if len(calls) == 4 else 0.8  # The third best predicted is fastest.
  _, choice, stepped = _Stepped(monkeypatch, Seconds)
  assert auto_config.Fields(choice.chosen) == stepped[3] and not _IsPlain(stepped[3])
  assert auto_config.Report(choice)[1].rstrip().endswith('2.00x')


def test_a_candidate_that_runs_out_of_memory_is_reported_and_passed_over(monkeypatch):
  def Seconds(fields):
    if not _IsPlain(fields):
      raise tf.errors.ResourceExhaustedError(None, None, 'OOM when allocating tensor')
    return 1.0
  _, choice, _ = _Stepped(monkeypatch, Seconds)
  assert _IsPlain(auto_config.Fields(choice.chosen))
  assert [t.seconds is None and t.error.startswith('out of memory') for t in choice.trials][1:] == [True] * 3


def test_only_what_fits_the_budget_is_stepped(monkeypatch):
  options = auto_config.Options(_LAYERS, _SHAPES, 24, 2, {})
  budget = sorted(o.peak for o in options)[len(options) // 2] / (1 - auto_config.MARGIN)
  _, choice, _ = _Stepped(monkeypatch, lambda f: 1.0, budget)
  assert all(t.option.peak <= budget * (1 - auto_config.MARGIN) for t in choice.trials)


@pytest.mark.parametrize('fields', [
    dict(num_splits=1, num_micro_batches=1, remat='never', schedule='gpipe'),
    pytest.param(dict(num_splits=2, num_micro_batches=4, remat='always', schedule='1f1b', balance=[2, 4]),
                 marks=pytest.mark.slow)])
def test_a_real_step_is_timed(fields):
  devices = [d.name for d in tf.config.list_logical_devices('CPU')][:2]
  inputs = tf.random.normal([24, 64])
  assert step_trials.StepSeconds(_LAYERS, inputs, fields, devices, repeats=1) > 0


def test_the_plain_model_is_stepped_again_at_the_end_and_its_best_kept(monkeypatch):
  """A process's first trial can run slower (the plain model is stepped first)."""
  plain_calls = []

  def Seconds(fields):
    if _IsPlain(fields):
      plain_calls.append(1)
      return 3.0 if len(plain_calls) == 1 else 1.5
    return 2.0
  _, choice, _ = _Stepped(monkeypatch, Seconds)
  assert len(plain_calls) == 2 and choice.trials[0].seconds == 1.5 and _IsPlain(auto_config.Fields(choice.chosen))


def test_a_gain_within_the_noise_keeps_the_plain_model(monkeypatch):
  _, choice, _ = _Stepped(monkeypatch, lambda f: 1.0 if _IsPlain(f) else 0.97)
  assert _IsPlain(auto_config.Fields(choice.chosen))
  _, choice, _ = _Stepped(monkeypatch, lambda f: 1.0 if _IsPlain(f) else 0.9)
  assert not _IsPlain(auto_config.Fields(choice.chosen))


def test_the_configurations_stepped_differ_in_k_and_m_before_remat():
  # pylint: disable=protected-access
  ranked = sorted(auto_config.Options(_LAYERS, _SHAPES, 24, 2, {}), key=auto_config._Key, reverse=True)
  picked = auto_config._Distinct(ranked, 3)
  assert picked[0] is ranked[0] and len(picked) == 3
  assert {o.candidate.num_splits for o in picked} == {1, 2}
  assert len({(o.candidate.num_splits, o.candidate.num_micro_batches) for o in picked}) == 3
