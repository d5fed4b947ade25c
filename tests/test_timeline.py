"""The measured timeline: recording changes no result and respects the schedule's dependencies; the bubble, the
Chrome trace, the Gantt chart; the tool and --mode=profile. Checks that depend on timing or on TensorFlow's loop
lowering are in tests/regression/test_timeline_timing.py."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule
from lingpipe.gpipe import timeline
import pipeline_test_util as util
import timeline_test_util as ttu
import trainer_test_util

import pipeline_timeline  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.mark.parametrize('remat', ['always', 'except_last', 'never'])
def test_recording_changes_no_result_and_follows_the_schedule(remat):
  num_micro, num_cells = 6, 2  # M > K: the steady ticks run as a loop (remat always).
  _, pipe = util.Pair(util.Tanh(4, dim=64), num_splits=num_cells, num_micro_batches=num_micro, remat=remat)
  x = tf.constant(np.random.RandomState(0).normal(size=(48, 64)), tf.float32)
  recorder = timeline.Recorder()
  recorded, plain = ttu.RecordedSteps(pipe, x, recorder)
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
  by_key = ttu.ByAction(events)
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


@pytest.mark.slow
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
