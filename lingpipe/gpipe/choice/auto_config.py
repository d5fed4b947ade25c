"""Chooses a pipeline's K, M, remat, schedule and balance: the fastest predicted configuration that fits a budget,
then the fastest stepped of the best few (step_trials.py).

The planner (memory_plan.py) predicts each candidate's peak per device and its step time
(step_time.py: the plan run with layer times measured at the batch's and the micro-batches' sizes,
layer_times.py, and this machine's measured costs). Of the candidates whose process peak is within
the budget less a margin, the fastest is chosen (then the smaller peak; planner/ranking.py). Fields the user set stay
fixed; only those left to choose vary. runners/pipeline_choice.py applies this to a model's Params.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

from lingpipe.core import byte_sizes
from lingpipe.core import errors
from lingpipe.distributed import cluster
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe.choice import step_trials
from lingpipe.gpipe.planner import memory_plan
from lingpipe.gpipe.planner import ranking
from lingpipe.gpipe.planner import step_time

MARGIN = ranking.MARGIN  # Of the budget, kept free (the same for every chooser).
BALANCES = ('uniform', 'flops', 'time')  # 'time' when layer times are measured.


class Option(NamedTuple):
  """A candidate with the balance method that cut it."""
  candidate: memory_plan.Candidate
  balance: str  # a method of BALANCES, or 'given'
  peak: float  # what must fit the budget (a process's or a device's bytes)
  step_seconds: Optional[float]  # predicted, where layer times were measured


class Choice(NamedTuple):
  chosen: Option
  runner_up: Optional[Option]  # the next fastest that fits
  rejected: Optional[Option]  # the fastest that did not fit, when faster than the choice
  budget: Optional[int]  # bytes, before the margin; None: chosen for speed alone
  plain_seconds: Optional[float]  # the plain model's predicted step, from the measured times
  num_devices: int
  terms: Optional[step_time.Terms] = None  # this machine's costs the step times include
  trials: Tuple[step_trials.Trial, ...] = ()  # the configurations stepped here, and their measured seconds


MicroBatchChoices = memory_plan.MicroBatchChoices


def _Key(option):
  return ranking.RankKey(option.candidate.speedup, option.peak)


def Options(layer_params, input_shapes, batch_size, num_devices, fixed, peak_of=None, times=None, slots=0,
            dtype_size=4, fprop_dtype=None, terms=None) -> List[Option]:
  """Every distinct configuration the fields not in `fixed` allow ({field: value} of
  PipeliningLayer's num_splits, num_micro_batches, remat, schedule, balance), with its peak
  (`peak_of`, default the fullest device's) and predicted step time (from `times` and this machine's
  step_time.Terms `terms`)."""
  micro = (fixed['num_micro_batches'],) if 'num_micro_batches' in fixed else MicroBatchChoices(batch_size)
  remats = (fixed['remat'],) if 'remat' in fixed else schedule_lib.REMAT_POLICIES
  schedules = (fixed['schedule'],) if 'schedule' in fixed else schedule_lib.SCHEDULES
  if 'balance' in fixed:
    balances = [fixed['balance']]
  else:
    balances = [b for b in BALANCES if b != 'time' or times is not None]
  peak_of = peak_of or (lambda c: c.peak)
  plain = None
  if times is not None:
    whole = times(batch_size)
    plain = sum(whole.forward) + sum(whole.backward) + 2 * (terms or step_time.IDEAL).per_action
  seen, options = set(), []
  for balance in balances:
    for c in memory_plan.Candidates(layer_params, input_shapes, num_devices, batch_size, micro, remats,
                                    balance=balance, slots=slots, dtype_size=dtype_size, schedules=schedules,
                                    fprop_dtype=fprop_dtype, times=times, terms=terms):
      if 'num_splits' in fixed and c.num_splits != fixed['num_splits']:
        continue
      key = (c.schedule, c.remat, c.num_splits, c.num_micro_batches, c.counts, c.virtual_stages)
      if key in seen:
        continue
      seen.add(key)
      options.append(Option(c, balance if isinstance(balance, str) else 'given', peak_of(c),
                            plain / c.speedup if plain and c.speedup else None))
  return options


def Choose(options, num_devices, budget=None, margin=MARGIN, plain_seconds=None, terms=None) -> Choice:
  """The fastest option whose peak is within `budget` x (1 - margin) (any, without a budget); raises
  NothingFits when none is."""
  if not options:
    raise errors.ConfigError('No pipeline configuration to choose from: the fixed fields allow none (K at most %d '
                             'devices, M a divisor of the batch).' % num_devices)
  ranked = sorted(options, key=_Key, reverse=True)  # The rule of ranking.Recommend, on options.
  fitting = _Fitting(ranked, budget, margin)
  if not fitting:
    smallest = min(options, key=lambda o: o.peak)
    raise NothingFits(smallest, budget, margin)
  chosen = fitting[0]
  runner_up = fitting[1] if len(fitting) > 1 else None
  rejected = next((o for o in ranked if not _Fits(o, budget, margin)), None)
  if rejected is not None and _Key(rejected) <= _Key(chosen):
    rejected = None
  return Choice(chosen, runner_up, rejected, budget, plain_seconds, num_devices, terms)


def _Fits(option, budget, margin=MARGIN):
  """Whether `option`'s peak fits `budget` less `margin` (any does without a budget)."""
  return not budget or ranking.Fits(option.peak, budget, margin)


def _Fitting(ranked, budget, margin=MARGIN):
  """The options of `ranked` that fit `budget` less `margin` (_Fits), in order, less those re-computing more than a
  twin that fits (ranking.Fitting: stepped, such an option won by the machine's noise on pinned workers)."""
  return ranking.Fitting(ranked, lambda o: _Fits(o, budget, margin), lambda o: o.candidate)


class NothingFits(errors.ConfigError):
  """No configuration's predicted peak is within the budget."""

  def __init__(self, smallest, budget, margin):
    self.smallest, self.budget = smallest, budget
    c = smallest.candidate
    super().__init__(
        'No pipeline configuration fits %s (less a %d%% margin): the smallest predicted peak is %s (K=%d, M=%d, '
        "remat='%s', schedule='%s'). A budget of %s would fit it, or more devices." % (
            byte_sizes.Format(budget), round(margin * 100), byte_sizes.Format(smallest.peak), c.num_splits,
            c.num_micro_batches, c.remat, c.schedule, byte_sizes.Format(smallest.peak / (1 - margin))))


class Predictions(NamedTuple):
  options: List[Option]
  plain_seconds: Optional[float]
  terms: Optional[step_time.Terms]


def Predict(layer_params, input_shapes, num_devices, fixed=None, peak_of=None, fprop_dtype=None, dtype_size=4,
            slots=0, batch_dim=0, log=None, measure=True, input_dtypes=None, devices=None) -> Predictions:
  """Every Option the `fixed` fields allow, its step time predicted from the layers timed here and this machine's
  step_time.Terms on `devices` (step_trials.MeasureCosts; without `measure` the speed-ups are in flops).
  `input_dtypes`: the pipeline's (its inputs that are not floating). `devices`: the devices to choose among
  (default: the first `num_devices` local ones); the layers are timed on the first."""
  fixed = fixed or {}
  batch = memory_plan.BatchSize(input_shapes, batch_dim)
  costs = None
  if measure:
    micro = [fixed['num_micro_batches']] if 'num_micro_batches' in fixed else list(MicroBatchChoices(batch))
    costs = step_trials.MeasureCosts(layer_params, input_shapes, batch, micro, _Devices(devices, num_devices),
                                     fprop_dtype or 'float32', batch_dim, log, input_dtypes,
                                     split_backward=fixed.get('schedule', 'zero_bubble') == 'zero_bubble')
  options = Options(layer_params, input_shapes, batch, num_devices, fixed, peak_of, costs and costs.times,
                    slots=slots, dtype_size=dtype_size, fprop_dtype=fprop_dtype, terms=costs and costs.terms)
  return Predictions(options, costs and costs.plain_seconds, costs and costs.terms)


def _Devices(devices, num_devices):
  """`devices`, else the first `num_devices` local ones."""
  return list(devices or cluster.LocalDevices()[:max(1, num_devices)])


def ChooseFor(layer_params, input_shapes, num_devices, fixed=None, budget=None, peak_of=None, fprop_dtype=None,
              dtype_size=4, slots=0, batch_dim=0, log=None, measure=True, input_dtypes=None, devices=None) -> Choice:
  """Choose among what Predict gives, then (`measure`) step the best predicted and the plain model and take the
  fastest measured (Stepped): what lingpipe-train and lingpipe.keras.Pipeline run."""
  predicted = Predict(layer_params, input_shapes, num_devices, fixed, peak_of, fprop_dtype, dtype_size, slots,
                      batch_dim, log, measure, input_dtypes, devices)
  choice = Choose(predicted.options, num_devices, budget, plain_seconds=predicted.plain_seconds,
                  terms=predicted.terms)
  if not measure:
    return choice
  return Stepped(choice, predicted.options, layer_params, input_shapes, fprop_dtype or 'float32', batch_dim,
                 input_dtypes, log, devices=devices)


def _IsPlain(option):
  c = option.candidate
  return c.num_splits == 1 and c.num_micro_batches == 1 and c.remat == 'never'


def _Distinct(ranked, count):
  """Up to `count` of `ranked` options to step: the best predicted, then the best of each other K, then the best
  of each other M, then the rest in order. The predictions that go most wrong are across K (how much work devices
  share) and M (a small micro-batch's speed); the best three are often one K and M with another remat."""
  picked = []
  for key in (lambda o: None, lambda o: o.candidate.num_splits,
              lambda o: (o.candidate.num_splits, o.candidate.num_micro_batches), id):
    seen = {key(o) for o in picked}
    for o in ranked:
      if len(picked) < count and key(o) not in seen and o not in picked:
        picked.append(o)
        seen.add(key(o))
  return picked


def Stepped(choice, options, layer_params, input_shapes, dtype, batch_dim=0, input_dtypes=None, log=None,
            margin=MARGIN, devices=None) -> Choice:
  """`choice` remade from measured steps (step_trials.py): the plain model (where it is an option that fits) and
  the best predicted options that fit, the fastest measured chosen."""
  fitting = _Fitting(sorted(options, key=_Key, reverse=True), choice.budget, margin)
  plain = [o for o in fitting if _IsPlain(o)]
  plain.sort(key=lambda o: o.candidate.schedule != 'gpipe')
  # One cell and one micro-batch is the plain model's work, or more where it re-computes: stepped beside it, such
  # an option could only win by the noise of the machine (as it did on worker processes).
  one_call = lambda o: o.candidate.num_splits == 1 and o.candidate.num_micro_batches == 1
  others = _Distinct([o for o in fitting if not (plain and one_call(o))], step_trials.MAX_CANDIDATES)
  if plain and one_call(choice.chosen):
    choice = choice._replace(chosen=plain[0])
  candidates = [(step_trials.PLAIN_LABEL, plain[0], Fields(plain[0]))] if plain else []
  candidates += [(Describe(o), o, Fields(o)) for o in others]
  batch = memory_plan.BatchSize(input_shapes, batch_dim)
  trials = step_trials.Run(candidates, layer_params, input_shapes, batch, dtype,
                           _Devices(devices, choice.num_devices), batch_dim, input_dtypes, log=log)
  measured = sorted((t for t in trials if t.seconds is not None), key=lambda t: t.seconds)
  if not measured:
    return choice._replace(trials=tuple(trials))
  plain_trial = [t for t in measured if t.label == step_trials.PLAIN_LABEL]
  if plain_trial and measured[0].seconds > plain_trial[0].seconds * (1 - step_trials.MIN_GAIN):
    measured.remove(plain_trial[0])  # Within the noise of the plain model: the plain model.
    measured.insert(0, plain_trial[0])
  runner_up = measured[1].option if len(measured) > 1 else choice.runner_up
  return choice._replace(chosen=measured[0].option, runner_up=runner_up, trials=tuple(trials))


def Fields(option) -> Dict[str, object]:
  """The PipeliningLayer values of `option`: the five fields, virtual_stages, and the cut as a balance list."""
  c = option.candidate
  return dict(num_splits=c.num_splits, num_micro_batches=c.num_micro_batches, remat=c.remat, schedule=c.schedule,
              balance=list(c.counts), virtual_stages=c.virtual_stages)


def Describe(option) -> str:
  """'K=2, M=8, remat=always, gpipe, cut 5,5 (flops)'."""
  c = option.candidate
  schedule = c.schedule + (' v=%d' % c.virtual_stages if c.virtual_stages > 1 else '')
  return 'K=%d, M=%d, remat=%s, %s, cut %s (%s)' % (c.num_splits, c.num_micro_batches, c.remat, schedule,
                                                     ','.join(map(str, c.counts)), option.balance)


def Report(choice, what='peak') -> List[str]:
  """The lines the trainer prints: the choice, the runner-up, the others stepped and the fastest rejected for
  memory, each with its predicted peak (`what` says whose), its predicted and stepped step time and speed-up."""
  budget = choice.budget
  limit = budget * (1 - MARGIN) if budget else None
  stepped = {id(t.option): t for t in choice.trials}
  plain = next((t.seconds for t in choice.trials if t.label == step_trials.PLAIN_LABEL), None)
  lines = ['%-10s %-58s %16s %11s %9s %9s' % ('', 'configuration', what + ' MiB', 'predicted s', 'stepped s',
                                              'speed-up')]

  def Row(label, option, note=''):
    predicted = '%.3f' % option.step_seconds if option.step_seconds is not None else '-'
    trial = stepped.get(id(option))
    seconds = trial.seconds if trial is not None else None
    speedup = plain / seconds if plain and seconds else option.candidate.speedup
    lines.append('%-10s %-58s %16.1f %11s %9s %8.2fx%s' % (
        label, Describe(option), option.peak / 2**20, predicted, '%.3f' % seconds if seconds else
        (trial.error[:9] if trial is not None else '-'), speedup, note))

  Row('chosen', choice.chosen)
  shown = {id(choice.chosen)}
  if choice.runner_up is not None:
    Row('runner-up', choice.runner_up)
    shown.add(id(choice.runner_up))
  for t in choice.trials:
    if t.option is not None and id(t.option) not in shown:
      Row('plain' if t.label == step_trials.PLAIN_LABEL else 'stepped', t.option)
  if choice.rejected is not None:
    Row('rejected', choice.rejected, '  (over %.0f MiB)' % (limit / 2**20))
  if plain:
    lines.append('(stepped here: 3 training steps of each on a sample batch, the best kept; the fastest is chosen; '
                 'speed-ups of those stepped are against the plain model\'s %.3f s, of the others predicted)' % plain)
  if choice.plain_seconds is not None:
    lines.append('(the plain model, one device, no micro-batches: %.3f s predicted%s)' % (
        choice.plain_seconds, '' if plain else '; speed-ups against it'))
  if choice.terms is not None:
    lines.append('(measured here: %s)' % step_time.Describe(choice.terms))
  return lines
