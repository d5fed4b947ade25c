"""The planner's step time (gpipe/planner/step_time.py): the plan run action by action, with this machine's costs."""

import pytest

from lingpipe.gpipe import schedule
from lingpipe.gpipe.plan import BACKWARD, FORWARD, WEIGHT
from lingpipe.gpipe.planner import step_time


def _Costs(plan, forward, backward):
  costs = {}
  for k in range(plan.num_cells):
    costs[(FORWARD, k)] = forward[k]
    costs[(BACKWARD, k)] = backward[k] / 2 if plan.splits_backward else backward[k]
    costs[(WEIGHT, k)] = backward[k] / 2
  return costs


@pytest.mark.parametrize('name', schedule.SCHEDULES)
def test_without_recompute_it_is_the_schedules_simulation(name):
  cells = 4 if name == 'interleaved_1f1b' else 2
  plan = schedule.MakePlan(name, 4, cells, 'never', 2)
  forward, backward = (1.0, 0.5, 2.0, 1.0)[:cells], (2.0, 1.0, 3.0, 2.5)[:cells]
  assert step_time.Predict(plan, forward, backward) == pytest.approx(
      schedule.Simulate(plan, costs=_Costs(plan, forward, backward))[0])


def test_a_forward_is_recomputed_only_where_the_plan_keeps_its_input():
  # One cell: 1F1B runs each backward right after its forward, so remat keeps the activations and costs nothing.
  one_f_one_b = [step_time.Predict(schedule.MakePlan('1f1b', 4, 1, remat, 1), (1.0,), (2.0,))
                 for remat in ('never', 'always')]
  assert one_f_one_b == [12.0, 12.0]
  # Fill-drain on two cells: each re-computing backward adds its forward, except the last micro-batch's
  # on the last cell (its backward follows its forward).
  never = step_time.Predict(schedule.MakePlan('gpipe', 4, 2, 'never', 2), (1.0, 1.0), (2.0, 2.0))
  always = step_time.Predict(schedule.MakePlan('gpipe', 4, 2, 'always', 2), (1.0, 1.0), (2.0, 2.0))
  assert never == pytest.approx(15.0) and always > never + 3.0


def test_devices_that_share_cores_are_bounded_by_their_concurrency():
  plan = schedule.MakePlan('gpipe', 8, 2, 'never', 2)
  free = step_time.Predict(plan, (1.0, 1.0), (2.0, 2.0))
  shared = step_time.Predict(plan, (1.0, 1.0), (2.0, 2.0), step_time.Terms(concurrency=(1.0, 1.0)))
  assert free == pytest.approx(27.0)  # 8 x 3 on each device and a 3-unit bubble.
  assert shared == pytest.approx(48.0)  # all 2 x 8 x 3 units, one device's worth at a time


def test_cell_calls_and_a_split_backward_cost_what_is_measured():
  terms = step_time.Terms(concurrency=(1.0,), split_backward=0.2, per_action=0.5)
  assert step_time.Predict(schedule.MakePlan('1f1b', 2, 1, 'never', 1), (1.0,), (2.0,), terms) == pytest.approx(
      2 * (1.0 + 2.0) + 4 * 0.5)
  # Zero bubble: a forward, and a backward split into two actions of 1.2 each.
  assert step_time.Predict(schedule.MakePlan('zero_bubble', 1, 1, 'never', 1), (1.0,), (2.0,),
                           terms) == pytest.approx(1.0 + 2.4 + 3 * 0.5)


def test_a_hand_off_is_paid_by_the_action_that_sends_to_another_device():
  terms = step_time.Terms(concurrency=(1.0, 2.0), handoff=0.25, handoff_per_byte=0.5 / 2**20)
  plan = schedule.MakePlan('gpipe', 1, 2, 'never', 2)
  # F0, hand-off of 1 MiB, F1, B1, its input gradient handed back, B0.
  assert step_time.Predict(plan, (1.0, 1.0), (2.0, 2.0), terms, handoff_bytes=(2**20, 4)) == pytest.approx(
      1.0 + 0.75 + 1.0 + 2.0 + 0.75 + 2.0)
  assert step_time.Predict(plan, (1.0, 1.0), (2.0, 2.0), terms) == pytest.approx(6.0)  # No sizes: not counted.
  one = schedule.MakePlan('gpipe', 1, 1, 'never', 1)  # One device: nothing to hand off.
  assert step_time.Predict(one, (2.0,), (4.0,), terms, handoff_bytes=(2**20,)) == pytest.approx(6.0)
  assert step_time.Describe(terms).endswith('a hand-off 250.00 ms + 500.00 ms a MiB')


def test_a_hand_off_between_logical_devices_costs_little_and_is_never_negative():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.choice import step_trials  # pylint: disable=g-import-not-at-top
  devices = [d.name for d in tf.config.list_logical_devices('CPU')][:2]
  fixed, per_byte = step_trials.Handoff(devices, repeats=2)
  assert 0 <= fixed < 0.01 and 0 <= per_byte * 2**20 < 0.05  # In one process: under 10 ms, 50 ms a MiB.
  assert step_trials.Handoff(devices[:1]) == (0.0, 0.0)


def test_the_terms_are_measured_here_with_the_models_own_layer():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import layer_times  # pylint: disable=g-import-not-at-top
  import pipeline_test_util as util  # pylint: disable=g-import-not-at-top
  layers, built = util.Tanh(3, 128), {}
  times = layer_times.Measure(layers, [64, 128], 64, repeats=1, built=built)
  heaviest = layer_times.Heaviest(layers, [64, 128], times)
  unit = layer_times.RunsOnDevice(heaviest, built=built)
  assert heaviest.inputs == tf.TensorSpec([64, 128], tf.float32) and heaviest.params.cls is layers[heaviest.index].cls
  devices = [d.name for d in tf.config.list_logical_devices('CPU')][:2]
  from lingpipe.gpipe.choice import step_trials  # pylint: disable=g-import-not-at-top
  terms = step_trials.MeasureTerms(unit, devices,
                                   lambda: (step_trials.SplitBackward(heaviest, 64, times), step_trials.PerAction()))
  assert len(terms.concurrency) == len(devices) and terms.concurrency[0] == pytest.approx(1.0)
  assert all(0 < c <= 2 * len(devices) for c in terms.concurrency)
  # Loose enough for a loaded machine: with the backward at least a third of the step, the split costs
  # 3 x (split step / 1F1B step - 1) backwards, so 50 takes a split step 17 times the 1F1B one, each
  # the best of several timings.
  assert 0 <= terms.split_backward < 50 and 0 <= terms.per_action < 1
  assert 'a cell call' in step_time.Describe(terms)


@pytest.mark.parametrize('exact_seconds, timed', [(1e9, [8, 12, 16, 24, 48]), (0.0, [8, 16, 48])])
def test_every_micro_batch_size_is_timed_while_it_is_cheap_the_rest_interpolated(monkeypatch, exact_seconds, timed):
  """Batch 48, M up to 6: the three anchors (48, 8 and 16) are always timed; 24 and 12 too while timing lasts."""
  from lingpipe.gpipe.choice import auto_config  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.choice import step_trials  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import layer_times  # pylint: disable=g-import-not-at-top
  import pipeline_test_util as util  # pylint: disable=g-import-not-at-top
  sizes = []
  measure = layer_times.Measure
  monkeypatch.setattr(layer_times, 'Measure', lambda *a, **k: sizes.append(a[2]) or measure(*a, **k))
  monkeypatch.setattr(step_trials, 'MeasureTerms', lambda *unused: step_time.IDEAL)
  monkeypatch.setattr(step_trials, 'EXACT_SIZES_SECONDS', exact_seconds)
  monkeypatch.setattr(auto_config, 'MicroBatchChoices', lambda batch: (1, 2, 3, 4, 6))
  predicted = auto_config.Predict(util.Tanh(2, dim=16), [48, 16], 1, fixed={'remat': 'never', 'schedule': 'gpipe'})
  assert sorted(sizes) == timed
  assert all(o.step_seconds > 0 for o in predicted.options)


def test_a_split_backwards_cost_is_a_fraction_of_the_backward_not_of_the_step(monkeypatch):
  """A step of forward 1 and backward 2 (3 s) that takes 4 s split: the backward costs 50% more, not 33%."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.choice import step_trials  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import layer_times  # pylint: disable=g-import-not-at-top
  import pipeline_test_util as util  # pylint: disable=g-import-not-at-top
  steps = {'1f1b': 3.0, 'zero_bubble': 4.0}
  monkeypatch.setattr(step_trials, '_StepSeconds', lambda layers, inputs, m, schedule, batch_dim: steps[schedule])
  layer = layer_times.Layer(util.Tanh(2, 16)[1], tf.TensorSpec([8, 16], tf.float32), 1)
  times = layer_times.Times(8, (5.0, 1.0), (9.0, 2.0))  # the second layer's entry counts
  assert step_trials.SplitBackward(layer, 8, times) == pytest.approx(0.5)
  # A backward timed at 0 (noise on a loaded machine) counts as a third of the step, not as nothing.
  unmeasured = layer_times.Times(8, (5.0, 1.0), (9.0, 0.0))
  assert step_trials.SplitBackward(layer, 8, unmeasured) == pytest.approx(1.0 / (3.0 * step_trials.MIN_BACKWARD_SHARE))
