"""--pipeline=auto and 'auto' pipeline fields: chosen within the budget, fixed fields kept, recorded and reused,
and what is chosen trains as the plain model does (gpipe/choice/auto_config.py, runners/pipeline_choice.py)."""

import os

import pytest

from lingpipe.core import errors
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe.choice import auto_config
from lingpipe.runners import run_params
import pipeline_test_util as util
from test_transparency import _Batch, _DIM, _Plain, _Train
from trainer_test_util import RunTrainer

_MODEL = 'synthetic.DeepMlpGPipe'


def test_pipeline_fields_take_auto_from_text_and_refuse_near_misses():
  p = run_params.BuildModelParams(
      _MODEL, override="task.network.num_splits='auto';task.network.num_micro_batches='auto'")
  assert p.task.network.num_splits == 'auto' and p.task.network.num_micro_batches == 'auto'
  with pytest.raises(errors.ConfigError, match=r"cannot use \"'autoo'\"; expected 'auto' or an int >= 1"):
    run_params.BuildModelParams(_MODEL, override="task.network.num_splits='autoo'")
  with pytest.raises(errors.ConfigError, match=r"0 is not allowed; expected 'auto' or an int >= 1"):
    run_params.BuildModelParams(_MODEL, override='task.network.num_micro_batches=0')


def test_a_balance_list_in_text_is_a_list():
  p = run_params.BuildModelParams(_MODEL, override='task.network.balance=[1,7]')
  assert p.task.network.balance == [1, 7]


def test_a_layer_left_auto_is_refused_in_one_line_naming_the_trainer():
  p = pipelining_layer.PipeliningLayer.Params().Set(name='net', layers=util.Tanh(4), num_splits='auto')
  with pytest.raises(errors.ConfigError, match=r"num_splits='auto' is chosen by lingpipe-train"):
    p.Instantiate()


def _Options(fixed=None, num_devices=2):
  return auto_config.Options(util.Tanh(6, 64), [24, 64], 24, num_devices, fixed or {})


def test_the_fastest_configuration_that_fits_is_chosen_and_the_faster_one_that_does_not_is_named():
  base = _Options()[0]

  def Option(speedup, peak):
    return base._replace(candidate=base.candidate._replace(speedup=speedup), peak=peak)

  options = [Option(1.0, 100), Option(1.5, 200), Option(1.8, 400), Option(1.7, 300), Option(1.7, 250)]
  assert auto_config.Choose(options, 2).chosen.peak == 400  # No budget: the fastest.
  choice = auto_config.Choose(options, 2, 350 / (1 - auto_config.MARGIN))
  assert (choice.chosen.peak, choice.runner_up.peak, choice.rejected.peak) == (250, 300, 400)  # Ties: less memory.
  lines = auto_config.Report(choice)
  assert [line.split()[0] for line in lines[1:4]] == ['chosen', 'runner-up', 'rejected']
  assert lines[3].endswith('(over 0 MiB)')
  assert auto_config.Choose(options, 2, 450 / (1 - auto_config.MARGIN)).rejected is None


def test_nothing_fits_says_the_budget_that_would():
  options = _Options()
  smallest = min(o.peak for o in options)
  with pytest.raises(auto_config.NothingFits, match=r'smallest predicted peak is .* A budget of .* would fit it'):
    auto_config.Choose(options, 2, smallest)  # Within the budget, but not within the margin.


def test_fixed_fields_stay_fixed():
  options = _Options({'num_splits': 2, 'remat': 'never', 'schedule': 'gpipe'})
  assert options and all((o.candidate.num_splits, o.candidate.remat, o.candidate.schedule) == (2, 'never', 'gpipe')
                         for o in options)
  assert {o.candidate.num_micro_batches for o in options} == {1, 2, 3, 4, 6, 8, 12, 24}  # M divides the batch.
  assert all(o.candidate.counts == (2, 4) for o in _Options({'num_splits': 2, 'balance': [2, 4]}))


@pytest.mark.parametrize('schedule', sorted(schedule_lib.SCHEDULES))
@pytest.mark.slow
def test_what_is_chosen_trains_as_the_plain_model(schedule):
  """Each schedule's choice, with no budget and with the tightest, gives the plain model's loss and gradients."""
  layers = util.Tanh(6, dim=_DIM)
  options = auto_config.Options(layers, [12, _DIM], 12, 2, {'schedule': schedule})
  tightest = min(o.peak for o in options) / (1 - auto_config.MARGIN) + 1
  chosen = {auto_config.Choose(options, 2, budget).chosen.candidate for budget in (None, tightest)}
  for candidate in chosen:
    fields = auto_config.Fields(auto_config.Option(candidate, 'given', 0, None))
    plain, pipe = util.Pair(layers, **fields)
    x, loss_inputs = _Batch(candidate.num_micro_batches, seed=candidate.num_splits)  # 3 rows a micro-batch.
    util.AssertClose(_Plain(plain, x, loss_inputs), _Train(pipe, x, loss_inputs))


def _Recorded(logdir, key):
  with open(os.path.join(logdir, 'params.txt'), encoding='utf-8') as f:
    return dict(line.split(' : ', 1) for line in f.read().splitlines() if ' : ' in line)[key]


@pytest.mark.slow
def test_the_trainer_chooses_says_so_records_the_choice_and_a_resume_reuses_it(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  common = ['--model=' + _MODEL, '--logdir=' + logdir, '--pipeline=auto', '--pipeline_devices=2']
  code, out, err = RunTrainer(capsys, *common, '--max_steps=2',
                              "--model_params_override=task.network.remat='always'")
  assert code == 0, err
  assert 'Pipeline task.network chosen (num_splits, num_micro_batches, schedule, balance were \'auto\'' in out
  assert 'no memory budget: chosen for speed alone' in out
  assert any(line.split()[:1] == ['chosen'] for line in out.splitlines())
  assert _Recorded(logdir, 'task.network.remat') == "'always'"  # Fixed by the override.
  chosen = {k: _Recorded(logdir, 'task.network.' + k) for k in ('num_splits', 'num_micro_batches', 'schedule')}
  assert 'auto' not in str(chosen) and "machine=" in _Recorded(logdir, 'task.network.auto_choice')

  code, out, err = RunTrainer(capsys, *common, '--max_steps=3', "--model_params_override=task.network.remat='always'")
  assert code == 0, err
  assert "the run's recorded configuration" in out and 'not timed again' in out and 'chosen (' not in out
  assert {k: _Recorded(logdir, 'task.network.' + k) for k in chosen} == chosen

  code, out, err = RunTrainer(capsys, *common, '--max_steps=4', "--model_params_override=task.network.remat='never'")
  assert code == 0, err
  assert 'remat set differently from the recorded choice' in out and 'chosen (' in out

  code, out, err = RunTrainer(capsys, '--model=' + _MODEL, '--logdir=' + logdir, '--mode=eval')
  assert code == 0, err


def test_a_model_without_a_pipeline_is_refused(capsys, tmp_path):
  code, _, err = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + str(tmp_path), '--pipeline=auto')
  assert code == 1 and 'has no PipeliningLayer to configure' in err


@pytest.mark.slow
def test_a_keras_pipeline_chooses_at_the_first_fit_shows_it_in_summary_and_saves_the_choice(capsys):
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import lingpipe.keras as lk  # pylint: disable=g-import-not-at-top
  model = keras.Sequential([keras.Input((32,))] + [keras.layers.Dense(64, activation='relu') for _ in range(3)] +
                           [keras.layers.Dense(4)])
  pipelined = lk.Pipeline(model, num_splits='auto', num_micro_batches='auto', remat='never', device_memory='64MiB')
  shown = []
  pipelined.summary(print_fn=lambda line, *unused: shown.append(line))
  assert any("chosen at the first fit" in line for line in shown)
  with pytest.raises(errors.ConfigError, match=r"chosen from the first batch of fit, evaluate, predict"):
    pipelined.cells()
  pipelined.compile(optimizer='adam', loss=keras.losses.MeanSquaredError())
  history = pipelined.fit(np.ones((32, 32), np.float32), np.zeros((32, 4), np.float32), batch_size=16, verbose=0)
  assert np.isfinite(history.history['loss'][0])
  assert 'Chosen for num_splits, num_micro_batches' in capsys.readouterr().out
  assert len(pipelined.trainable_variables) == 8  # The pipeline's units alone: 4 Dense layers' kernels and biases.
  shown = []
  pipelined.summary(print_fn=lambda line, *unused: shown.append(line))
  assert any('Chosen for num_splits, num_micro_batches' in line for line in shown)
  config = pipelined.get_config()
  assert isinstance(config['num_splits'], int) and isinstance(config['num_micro_batches'], int)
  assert config['remat'] == 'never' and 16 % config['num_micro_batches'] == 0  # From fit's batch of 16.
  again = pipelined.fit(np.ones((32, 32), np.float32), np.zeros((32, 4), np.float32), batch_size=16, verbose=0)
  assert np.isfinite(again.history['loss'][0]) and 'Chosen for' not in capsys.readouterr().out  # Chosen once.


def _WorkerRecord(num_splits, workers):
  devices = ', '.join('/job:worker/replica:0/task:%d/device:CPU:0' % t for t in range(workers))
  return '\n'.join([
      'task.network.num_splits : %d' % num_splits, 'task.network.num_micro_batches : 2',
      "task.network.remat : 'never'", "task.network.schedule : 'gpipe'", "task.network.balance : 'uniform'",
      'task.network.virtual_stages : 1',
      "task.network.auto_choice : 'K=%d, M=2 | machine=workers %s | budget=none | date=2026-11-29'" % (
          num_splits, devices)])


@pytest.mark.parametrize('workers', [1, 3])
def test_a_choice_made_on_workers_is_refused_on_too_few_and_said_on_a_different_set(capsys, workers):
  from lingpipe.runners import pipeline_choice  # pylint: disable=g-import-not-at-top
  p = run_params.BuildModelParams(_MODEL, override="task.network.num_splits='auto';task.network.num_micro_batches="
                                  "'auto';task.network.remat='auto';task.network.schedule='auto'")
  if workers < 2:
    with pytest.raises(errors.ConfigError, match=r"recorded configuration has K=2 cells, chosen on 2 worker\(s\); "
                       r"this cluster has 1 worker\(s\) per replica\. Start the workers it was chosen on, or start a "
                       r"new logdir \(or set task\.network\.num_splits\) to choose again among these\.$"):
      pipeline_choice.Resolve(p, 1, recorded_text=_WorkerRecord(2, 2), workers=workers)
    return
  pipeline_choice.Resolve(p, 1, recorded_text=_WorkerRecord(2, 2), workers=workers)
  assert p.task.network.num_splits == 2
  assert 'It was chosen on 2 worker(s); this is 3 worker(s).' in capsys.readouterr().out
  pipeline_choice.Resolve(p.Copy(), 1, recorded_text=_WorkerRecord(2, 3), workers=3)
  assert 'It was chosen on' not in capsys.readouterr().out


def test_a_keras_pipeline_refuses_an_open_batch_size_before_it_chooses(capsys):
  """A dataset batched without drop_remainder has no batch size to pad to: refused before the trials (they ran,
  then the first step refused it)."""
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import lingpipe.keras as lk  # pylint: disable=g-import-not-at-top
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(2)])
  pipelined = lk.Pipeline(model, num_splits='auto', num_micro_batches='auto')
  pipelined.compile(optimizer='adam', loss=keras.losses.MeanSquaredError())
  data = tf.data.Dataset.from_tensor_slices((np.ones((10, 8), np.float32), np.zeros((10, 2), np.float32))).batch(4)
  for call in (lambda: pipelined.fit(data, verbose=0), lambda: pipelined.evaluate(data, verbose=0),
               lambda: pipelined.predict(data.map(lambda x, y: x), verbose=0)):
    with pytest.raises(errors.ConfigError, match=r'the batch size is unknown .* Pass batch_size= to Pipeline, or '
                       r'batch with drop_remainder=True\.'):
      call()
  assert 'Chosen for' not in capsys.readouterr().out  # No trial ran.
