"""The measured timeline: recording changes no result, respects the schedule's dependencies, lets cells overlap;
the bubble, the Chrome trace, the Gantt chart; the tool and --mode=profile."""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule
from lingpipe.gpipe import timeline
import pipeline_test_util as util
import trainer_test_util

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tools'))
import pipeline_timeline  # pylint: disable=g-import-not-at-top,wrong-import-position


def _Steps(pipe, x, recorder):
  """(recorded step, plain step) tf.functions: loss and gradients (and the recorded rows)."""

  def Body(x):
    with tf.GradientTape() as tape:
      with context.Training(True):
        loss = tf.reduce_sum(tf.square(pipe.FProp(x)))
    return loss, tape.gradient(loss, pipe.trainable_variables)

  @tf.function(autograph=False)
  def Recorded(x):
    with timeline.Recording(recorder):
      result = Body(x)
      return result, recorder.Collect()

  return Recorded, tf.function(Body, autograph=False)


def _ByAction(events):
  return {(e.kind, e.cell, e.micro_batch): e for e in events}


def _EachStep(recorded, x, recorder, num_steps=16):
  """The events of `num_steps` recorded steps, each by action. A check of how the devices overlap needs one step
  that shows it: on a loaded machine the devices may run a step, or a few in a row, one after the other."""
  return [_ByAction(recorder.Events(recorded(x)[1])) for _ in range(num_steps)]


@pytest.mark.parametrize('remat', ['always', 'except_last', 'never'])
def test_recording_changes_no_result_and_follows_the_schedule(remat):
  num_micro, num_cells = 6, 2  # M > K: the steady ticks run as a loop (remat always).
  _, pipe = util.Pair(util.Tanh(4, dim=64), num_splits=num_cells, num_micro_batches=num_micro, remat=remat)
  x = tf.constant(np.random.RandomState(0).normal(size=(48, 64)), tf.float32)
  recorder = timeline.Recorder()
  recorded, plain = _Steps(pipe, x, recorder)
  result, rows = recorded(x)
  util.AssertClose(plain(x), result)
  events = recorder.Events(rows)
  assert len(events) == 2 * num_micro * num_cells
  plan = schedule.MakePlan('gpipe', num_micro, num_cells, remat)
  assert recorder.Plans() == {'net': plan}
  for k in range(num_cells):  # Each device runs its actions in the plan's order.
    own = [e for e in events if e.cell == k]
    planned = [(a.kind, a.micro_batch) for a in plan.DeviceActions(k) if a.kind != plan_lib.SEND]
    assert all(e.start <= e.end for e in own)
    assert [(e.kind, e.micro_batch) for e in own if e.kind == timeline.FORWARD] == planned[:num_micro]
    assert [(e.kind, e.micro_batch) for e in own if e.kind == timeline.BACKWARD] == planned[num_micro:]
  by_key = _ByAction(events)
  for m in range(num_micro):  # Each task starts after the task whose output it reads has ended.
    assert by_key[('forward', 1, m)].start >= by_key[('forward', 0, m)].end
    # A taped task's end also waits for its weight-gradient sum, which the next device need not. remat always tapes
    # the last micro-batch too (schedule.KeepWhereBackwardFollows): its input gradients leave while its weight
    # gradients still run.
    if remat == 'always' and m < num_micro - 1:
      assert by_key[('backward', 0, m)].start >= by_key[('backward', 1, m)].end
  if remat == 'always':  # ...but cell 0's backward still waits for the gradient that cell 1's computes.
    last = num_micro - 1
    assert by_key[('backward', 0, last)].start >= by_key[('backward', 1, last)].start


def test_a_first_recomputation_runs_while_its_device_waits_for_the_gradient():
  """1F1B, K=2, M=2, remat always: cell 0 runs F0 F1 B0, so its first backward re-computes; that re-computation
  starts once F1 ends, while cell 1 still runs its backward of micro-batch 0, not once that backward's gradient
  arrives (executor._EarlyRecompute). Cell 1 re-computes nothing: each of its backwards follows its forward
  (schedule.KeepWhereBackwardFollows)."""
  # Actions of several ms each: the margin below is half a backward, which must outlast a loaded machine's thread
  # wake-ups (with 256 x 256 layers each action took ~1 ms under oneDNN, and a 1.2 ms miss was seen).
  _, pipe = util.Pair(util.Tanh(4, dim=512), num_splits=2, num_micro_batches=2, remat='always', schedule='1f1b')
  x = tf.constant(np.random.RandomState(0).normal(size=(2048, 512)), tf.float32)
  recorder = timeline.Recorder()

  @tf.function(autograph=False)
  def Recorded(x):
    with timeline.Recording(recorder):
      with tf.GradientTape() as tape, context.Training(True):
        loss, _ = pipe.FPropWithLoss(x, x, _SquaredSum)
      return tape.gradient(loss, pipe.trainable_variables), recorder.Collect()

  early = []
  for events in _EachStep(Recorded, x, recorder):
    assert ('recompute', 1, 0) not in events
    assert events[('forward', 0, 1)].end <= events[('recompute', 0, 0)].start
    assert events[('recompute', 0, 0)].end <= events[('backward', 0, 0)].start
    gradient = events[('backward', 1, 0)]
    early.append(events[('recompute', 0, 0)].start < (gradient.start + gradient.end) / 2)
  # Waiting for the gradient, it starts at 0.99-1.02 of the way through that backward in every step (the gradient
  # leaves with the backward's end); as planned, at -1.0 to 0.5 in most steps, loaded or not.
  assert any(early), early


def _SquaredSum(out, unused_targets):
  loss = tf.reduce_sum(tf.square(out))
  return loss, {'loss': (loss, tf.ones([]))}


@pytest.mark.parametrize('schedule_name', ['1f1b', 'zero_bubble'])
def test_an_inline_action_is_stamped_around_its_work(schedule_name):
  """Forwards traced inline (the loss inside, remat never) are stamped from outside (timeline.Timed). Once graph
  optimization had inlined the clock, its control edges no longer held: the last cell's Transformer forwards were
  recorded 0.0 ms wide, their work done after their end stamp. Both cells run alike layers on alike micro-batches,
  so their forwards take alike times."""
  import workloads  # pylint: disable=g-import-not-at-top  (tools/, on the path above)
  workload = workloads.Make('transformer', layers=4, batch=64)
  pipe = pipelining_layer.PipeliningLayer.Params().Set(
      name='inline_%s' % schedule_name, layers=workload.layers, num_splits=2, num_micro_batches=2, remat='never',
      schedule=schedule_name).Instantiate()
  recorder = timeline.Recorder()

  def MeanSquare(out, unused):
    loss = tf.reduce_mean(tf.square(out.x))
    return loss, {'loss': (loss, tf.ones([]))}

  @tf.function(autograph=False)
  def Recorded(inputs):
    with timeline.Recording(recorder):
      with tf.GradientTape() as tape, context.Training(True):
        loss, _ = pipe.FPropWithLoss(inputs, inputs.paddings, MeanSquare)
      return tape.gradient(loss, pipe.trainable_variables), recorder.Collect()

  widths = {}
  for _ in range(3):
    events = recorder.Events(Recorded(workload.inputs)[1])
    for e in events:
      if e.kind == timeline.FORWARD:
        widths.setdefault(e.cell, []).append(e.end - e.start)
  assert min(widths[1]) > 0.3 * np.median(widths[0]), widths


def test_cells_overlap_while_recording():
  """Plain tf.timestamp ops are chained in program order by tf.function, which serialized every action: cell 0's
  forward of micro-batch 1 began only when cell 1's of micro-batch 0 had ended. Recording must not do that."""
  _, pipe = util.Pair(util.Tanh(4, dim=256), num_splits=2, num_micro_batches=4, remat='always')
  x = tf.constant(np.random.RandomState(0).normal(size=(512, 256)), tf.float32)
  recorder = timeline.Recorder()
  recorded, _ = _Steps(pipe, x, recorder)
  overlaps = [events[('forward', 0, 1)].start < events[('forward', 1, 0)].end
              for events in _EachStep(recorded, x, recorder)]
  assert any(overlaps), overlaps


def test_a_recorded_loop_leaves_its_iterations_free_to_overlap():
  """A stamped cell call is stateful; tf.function's automatic control dependencies made every loop variable of the
  next iteration wait for every stateful op of this one, so the devices ran a looped pass in lock step (across two
  worker processes, recording took 1.7x the step). The body needs no such edges: all it passes on is data."""
  _, pipe = util.Pair(util.Tanh(4, dim=16), num_splits=2, num_micro_batches=6, remat='always')
  x = tf.constant(np.random.RandomState(0).normal(size=(12, 16)), tf.float32)
  recorded, _ = _Steps(pipe, x, timeline.Recorder())
  graph = recorded.get_concrete_function(x).graph
  bodies = [graph._get_function(op.get_attr('body').name).graph  # pylint: disable=protected-access
            for op in graph.get_operations() if op.type in ('While', 'StatelessWhile')]
  assert len(bodies) == 2  # The forward and the backward pass loop; their calls take timestamps.
  assert all(any(op.type == 'StatefulPartitionedCall' for op in body.get_operations()) for body in bodies)
  assert [body.control_outputs for body in bodies] == [[], []]


def _Event(cell, kind, m, start, end, device=None):
  return timeline.Event('net', device or 'CPU:%d' % cell, cell, kind, m, start, end)


def test_measured_bubble_chrome_trace_and_gantt_chart(tmp_path):
  f, b = timeline.FORWARD, timeline.BACKWARD
  # K=2, M=2, every action 1 s, the loss between the passes free: GPipe's ideal, bubble (K-1)/(M+K-1) = 1/3.
  events = [_Event(0, f, 0, 0, 1), _Event(0, f, 1, 1, 2), _Event(1, f, 0, 1, 2), _Event(1, f, 1, 2, 3),
            _Event(1, b, 1, 3, 4), _Event(1, b, 0, 4, 5), _Event(0, b, 1, 4, 5), _Event(0, b, 0, 5, 6)]
  assert timeline.MeasuredBubble(events) == {'net': pytest.approx(1 / 3)}
  assert schedule.Bubble(schedule.MakePlan('gpipe', 2, 2, 'always')) == pytest.approx(1 / 3)
  times = timeline.ActionTimes(events + [_Event(1, timeline.RECOMPUTE, 0, 5, 9)])['net']
  assert times == {(f, 0): 1.0, (f, 1): 1.0, (b, 0): 1.0, (b, 1): 1.0}  # The re-computation is not a backward.
  assert schedule.Simulate(schedule.MakePlan('gpipe', 2, 2, 'always'), costs=times)[1] == pytest.approx(1 / 3)
  # Overlapping actions of one device count once.
  overlapping = [_Event(0, f, 0, 0, 2), _Event(0, f, 1, 1, 3), _Event(1, f, 0, 0, 4)]
  assert timeline.MeasuredBubble(overlapping) == {'net': pytest.approx((0.25 + 0.0) / 2)}
  assert timeline.IdleFractions(overlapping) == {'net': {'CPU:0': pytest.approx(0.25), 'CPU:1': 0.0}}
  assert timeline.Overlap(overlapping) == {'net': pytest.approx(8 / 7 - 1)} and timeline.Overlap(events) == {'net': 0}
  trace = timeline.ChromeTrace(events)
  actions = [e for e in trace['traceEvents'] if e['ph'] == 'X']
  assert len(actions) == 8 and actions[0]['name'] == 'F 0' and actions[-1]['dur'] == pytest.approx(1e6)
  assert {e['args']['name'] for e in trace['traceEvents'] if e['name'] == 'thread_name'} == {
      'cell 0 on CPU:0', 'cell 1 on CPU:1'}
  timeline.WriteChromeTrace(events, str(tmp_path / 't.json'))
  assert json.load(open(tmp_path / 't.json')) == json.loads(json.dumps(trace))
  timeline.DrawGantt(events, str(tmp_path / 't.png'), 'a title')
  assert open(tmp_path / 't.png', 'rb').read(8) == b'\x89PNG\r\n\x1a\n'
  assert timeline.ShortDevice('/job:worker/replica:0/task:1/device:CPU:0') == 'task:1/CPU:0'
  assert timeline.ShortDevice('/job:localhost/replica:0/task:0/device:CPU:1') == 'CPU:1'


def test_collecting_without_a_pipeline_is_a_clear_error():
  with pytest.raises(errors.ConfigError, match='The timeline recorded nothing: no PipeliningLayer ran'):
    timeline.Recorder().Collect()


def test_the_timeline_tool_writes_the_chart_and_the_trace(tmp_path):
  result = pipeline_timeline.main(['--workload=dense', '--layers=3', '--width=32', '--batch=32', '--warmup=1',
                                   '--steps=2', '--num_micro_batches=4', '--out_dir=%s' % tmp_path])
  assert result['theoretical_bubble'] == pytest.approx(0.2)
  assert set(result['action_ms']) == {'forward 0', 'forward 1', 'backward 0', 'backward 1'}
  assert 0.0 <= result['simulated_bubble'] < 1.0
  assert 0.0 <= result['measured_bubble'] < 1.0 and result['recording_cost'] > 0
  idle = result['idle_by_device']
  assert len(idle) == 2 and result['measured_bubble'] == pytest.approx(sum(idle.values()) / 2, abs=0.05)
  assert os.path.getsize(result['png']) > 1000
  assert len([e for e in json.load(open(result['trace']))['traceEvents'] if e['ph'] == 'X']) == 16


def test_profile_mode_writes_the_timeline_of_a_training_step(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  code, out, err = trainer_test_util.RunTrainer(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + logdir,
                                                '--mode=profile', '--profile_steps=2')
  assert code == 0, err
  assert 'pipeline deep_mlp/network (gpipe, 2 cells on 2 devices, M=4): bubble measured ' in out
  assert 'theoretical 0.200, the plan with the measured action times 0.' in out and '(busiest device 0.' in out
  assert sorted(os.listdir(os.path.join(logdir, 'profile'))) == ['step_0.json', 'step_0.png']
  line = trainer_test_util.Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=profile')
  assert line.startswith('The timeline recorded nothing')
