"""--mode=profile: the measured timeline of a model's training step (lingpipe/gpipe/timeline.py).

Runs training steps of the model on one batch of its training input, from the newest checkpoint (or fresh
weights), records when each pipeline action ran on its device, and writes logdir/profile/step_<N>.png (a Gantt
chart) and step_<N>.json (a Chrome trace) of the median step, with the measured bubble beside the schedule's
(schedule.Bubble: (K-1)/(M+K-1) for GPipe and 1F1B).
Nothing is saved: the profiled steps' updates stay in memory, so it may run while the model trains.
"""

import os
import statistics
import time

import tensorflow as tf

from lingpipe.distributed import cluster
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe import timeline
from lingpipe.logdir import checkpointer
from lingpipe.logdir import safe_write

PROFILE_DIR = 'profile'


def Profile(p, logdir, steps=5, warmup=2, out=None):
  """Profiles `steps` training steps after `warmup` ones; returns {pipeline: (measured, theoretical bubble)}."""
  mesh = cluster.Current()
  with mesh.Placement():
    task = p.task.Instantiate()
    optimizer = task.CreateOptimizer()
  schedule = task.CreateLearningRateSchedule()
  global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
  latest = checkpointer.LatestCheckpoint(os.path.join(logdir, checkpointer.TRAIN_DIR))
  if latest:
    checkpointer.Restore(tf.train.Checkpoint(step=global_step, task=task), latest, exact_task=True)
  batch = next(iter(p.input.Instantiate().GetDataset()))  # One batch: one trace, so one recorded layout.
  recorder = timeline.Recorder()

  @tf.function(autograph=False)
  def Step(batch):
    with mesh.Placement(), timeline.Recording(recorder):
      result = task.TrainStep(batch, global_step, optimizer, schedule)
      return result.loss, recorder.Collect()

  for _ in range(warmup):
    Step(batch)[0].numpy()
  runs, seconds = [], []
  for _ in range(steps):
    start = time.perf_counter()
    _, rows = Step(batch)
    runs.append(recorder.Events([r.numpy() for r in rows]))
    seconds.append(time.perf_counter() - start)
  events = timeline.MedianRun(runs)
  step = int(global_step.numpy())
  directory = os.path.join(logdir, PROFILE_DIR)
  png, trace = (os.path.join(directory, 'step_%d.%s' % (step, ext)) for ext in ('png', 'json'))
  title = '%s at step %d (the median of %d profiled steps)' % (p.model, step, steps)
  safe_write.ReplaceAtomically(png, lambda tmp: timeline.DrawGantt(events, tmp, title), 'timeline chart')
  safe_write.ReplaceAtomically(trace, lambda tmp: timeline.WriteChromeTrace(events, tmp), 'timeline trace')
  result = {}
  plans = recorder.Plans()
  explained = timeline.PlanWithMeasuredTimes(runs, events, plans)
  idle = timeline.IdleFractions(events)
  for pipeline, measured in timeline.MeasuredBubble(events).items():
    plan = plans[pipeline]
    result[pipeline] = (measured, schedule_lib.Bubble(plan))
    print('Profile of %s at step %d: pipeline %s (%s, %d cells on %d devices, M=%d): bubble measured %.3f '
          '(busiest device %.3f), theoretical %.3f, the plan with the measured action times %.3f' % (
              p.model, step, pipeline, plan.schedule, plan.num_cells, plan.num_devices, plan.num_micro_batches,
              measured, min(idle[pipeline].values()), result[pipeline][1], explained[pipeline].bubble),
          file=out, flush=True)
    warning = explained[pipeline].Warning()
    if warning:
      print('  Its %s.' % warning, file=out, flush=True)
  print('Step %.3f s (median of %d, recording included). Wrote %s and %s (chrome://tracing, ui.perfetto.dev).' % (
      statistics.median(seconds), steps, png, trace), file=out, flush=True)
  return result
