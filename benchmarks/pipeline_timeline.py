r"""The measured timeline of a pipeline's training step: a PNG Gantt chart, a Chrome trace, and the bubble measured
beside the schedule's (schedule.Bubble: (K-1)/(M+K-1) for GPipe and 1F1B).

    python benchmarks/pipeline_timeline.py --workload=dense --num_splits=2 --num_micro_batches=4 --remat=never
    python benchmarks/pipeline_timeline.py --workload=transformer --batch=256 --num_micro_batches=8 --workers=2
    python benchmarks/pipeline_timeline.py --schedule=interleaved_1f1b --virtual_stages=2 --workers=2

Locally the K cells run on K logical CPU devices with one intra-op thread each, as the trainer sets them up;
--workers=N runs them on N lingpipe-worker processes pinned one per core (one thread each), as
benchmarks/multiprocess_benchmark.py does. After --warmup steps it records --steps steps (lingpipe/gpipe/timeline.py:
timestamps in the graph) and writes the median one (by span) to --out_dir as <name>.png and <name>.json (open the
JSON in chrome://tracing or https://ui.perfetto.dev). It also times the same number of steps without recording,
interleaved, and prints the recording's cost.
"""

import argparse
import contextlib
import os
import statistics
import time


import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

from lingpipe import process_setup  # pylint: disable=g-import-not-at-top,wrong-import-position

process_setup.SetUpProcess()  # Before TensorFlow loads, as the binaries do.


STRETCHED = 1.1  # Recording cost above which the tool warns.


def _Args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  workloads.AddFlags(parser)
  parser.add_argument('--num_splits', type=int, default=2, help='K: cells.')
  parser.add_argument('--num_micro_batches', type=int, default=4, help='M: micro-batches.')
  parser.add_argument('--remat', default='never', choices=['always', 'except_last', 'never', 'per_layer'],
                      help='Remat policy.')
  parser.add_argument('--schedule', default='gpipe', choices=['gpipe', '1f1b', 'interleaved_1f1b', 'zero_bubble'],
                      help='Pipeline schedule.')
  parser.add_argument('--virtual_stages', type=int, default=1, help='Cells per device (interleaved_1f1b).')
  parser.add_argument('--unroll', action='store_true', help="Unroll GPipe's passes (loop_phases=False) instead "
                      'of running their steady ticks as one loop.')
  parser.add_argument('--workers', type=int, default=0, help='Run the cells on this many pinned worker processes '
                      '(0: logical devices in this process).')
  parser.add_argument('--warmup', type=int, default=3, help='Steps before recording.')
  parser.add_argument('--steps', type=int, default=5, help='Recorded steps (the median by span is drawn).')
  parser.add_argument('--out_dir', default='timelines', help='Where the PNG and the Chrome trace go.')
  return parser.parse_args(argv)


def _StepFunctions(layer, trainable, mesh, recorder):
  """(recorded step, plain step): forward, backward, and each gradient's squared sum on its variable's device (so
  no gradient travels to this process), under the mesh's placement as in BaseTask.TrainStep."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core import context  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import timeline  # pylint: disable=g-import-not-at-top

  def MeanSquare(out, rows):
    loss = tf.reduce_mean(tf.square(out.x if isinstance(out, dict) else out))
    return loss, {'loss': (loss, tf.cast(tf.shape(rows)[0], loss.dtype))}  # Per micro-batch, weighted by rows.

  def Body(inputs):
    rows = tf.zeros([tf.nest.flatten(inputs)[0].shape[0]])
    with tf.GradientTape() as tape:
      with context.Training(True):  # The loss inside the pipeline where the schedule needs it (1F1B).
        loss, _ = layer.FPropWithLoss(inputs, rows, MeanSquare)
    grads = tape.gradient(loss, trainable)
    norms = []
    for g, v in zip(grads, trainable):
      with tf.device(v.device):
        norms.append(tf.reduce_sum(tf.square(g)))
    return tf.add_n(norms)

  @tf.function(autograph=False)
  def Recorded(inputs):
    with mesh.Placement() if mesh else contextlib.nullcontext(), timeline.Recording(recorder):
      norm = Body(inputs)
      return norm, recorder.Collect()

  @tf.function(autograph=False)
  def Plain(inputs):
    with mesh.Placement() if mesh else contextlib.nullcontext():
      return Body(inputs)

  return Recorded, Plain


def Run(args):
  """Records the steps; returns a dict of what it measured and wrote."""
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import local_cluster  # pylint: disable=g-import-not-at-top
  k = args.num_splits
  with contextlib.ExitStack() as stack:
    if args.workers:
      cores = sorted(os.sched_getaffinity(0))
      workers = stack.enter_context(local_cluster.LocalCluster(
          args.workers, pin_cores=[{cores[i % len(cores)]} for i in range(args.workers)], threads=1))
      mesh = remote.Connect(remote.ParseClusterSpec(workers.spec_text), cluster.Params(), k)
    else:
      cluster.ConfigureLocalDevices(k)
      mesh = None
    return _Measure(args, mesh)


def _Measure(args, mesh):
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import schedule as schedule_lib  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import timeline  # pylint: disable=g-import-not-at-top
  k, m = args.num_splits, args.num_micro_batches
  workload = workloads.FromArgs(args)
  with cluster.Use(mesh) if mesh else contextlib.nullcontext():
    layer = pipelining_layer.PipeliningLayer.Params().Set(
        name='net', layers=workload.layers, num_splits=k, num_micro_batches=m, remat=args.remat,
        schedule=args.schedule, virtual_stages=args.virtual_stages, loop_phases=not args.unroll).Instantiate()
  recorder = timeline.Recorder()
  recorded, plain = _StepFunctions(layer, layer.trainable_variables, mesh, recorder)
  for _ in range(args.warmup):
    recorded(workload.inputs)[0].numpy()
    plain(workload.inputs).numpy()
  runs, recorded_s, plain_s = [], [], []
  for _ in range(args.steps):  # Interleaved, so both see the same machine.
    start = time.perf_counter()
    norm, rows = recorded(workload.inputs)
    rows = [r.numpy() for r in rows]
    recorded_s.append(time.perf_counter() - start)
    runs.append(recorder.Events(rows))
    start = time.perf_counter()
    plain(workload.inputs).numpy()
    plain_s.append(time.perf_counter() - start)
    del norm
  events = timeline.MedianRun(runs)
  bubbles = [timeline.MeasuredBubble(r)['net'] for r in runs]
  idle = [timeline.IdleFractions(r)['net'] for r in runs]
  idle = {timeline.ShortDevice(d): statistics.median(i[d] for i in idle) for d in idle[0]}
  plans = recorder.Plans()
  explained = timeline.PlanWithMeasuredTimes(runs, events, plans)['net']
  schedule = args.schedule + ('_v%d' % args.virtual_stages if args.virtual_stages > 1 else '')
  name = '%s_K%d_M%d_%s%s%s%s' % (args.workload, k, m, args.remat, '' if schedule == 'gpipe' else '_' + schedule,
                                  '_workers%d' % args.workers if args.workers else '',
                                  '_unrolled' if args.unroll else '')
  os.makedirs(args.out_dir, exist_ok=True)
  png, trace = os.path.join(args.out_dir, name + '.png'), os.path.join(args.out_dir, name + '.json')
  where = '%d pinned worker processes' % args.workers if args.workers else '%d logical devices' % k
  where += ', passes unrolled' if args.unroll else ''
  timeline.DrawGantt(events, png, '%s, K=%d, M=%d, remat=%s, schedule=%s, %s' % (
      workload.name, k, m, args.remat, schedule, where))
  timeline.WriteChromeTrace(events, trace)
  result = dict(name=name, png=png, trace=trace, workload=workload.name, num_splits=k, num_micro_batches=m,
                remat=args.remat, schedule=schedule, workers=args.workers, unroll=args.unroll,
                measured_bubble=statistics.median(bubbles), measured_bubbles=bubbles, idle_by_device=idle,
                theoretical_bubble=schedule_lib.Bubble(plans['net']),
                action_ms={'%s %d' % key: 1e3 * t for key, t in sorted(explained.times.items())},
                simulated_bubble=explained.bubble, overlap=explained.overlap, overlap_warning=explained.Warning(),
                step_s=statistics.median(plain_s), recorded_step_s=statistics.median(recorded_s))
  result['recording_cost'] = result['recorded_step_s'] / result['step_s']
  return result


def main(argv=None):
  args = _Args(argv)
  r = Run(args)
  print('%s, K=%d, M=%d, remat=%s, schedule=%s%s' % (
      r['workload'], r['num_splits'], r['num_micro_batches'], r['remat'], r['schedule'],
      ', %d workers' % r['workers'] if r['workers'] else ''))
  print('bubble: measured %.3f (median of %s), theoretical (schedule.Bubble) %.3f' % (
      r['measured_bubble'], ' '.join('%.3f' % b for b in r['measured_bubbles']), r['theoretical_bubble']))
  print('idle per device (median): %s; the busiest device idles %.3f, the schedule\'s own bubble: the others\' '
        'extra idle is waiting for it' % (', '.join('%s %.3f' % kv for kv in r['idle_by_device'].items()),
                                          min(r['idle_by_device'].values())))
  print('the plan with the measured action times (median ms per cell: %s) gives %.3f: the gap from the '
        'theoretical is unequal cells and actions, from the measured the waits between actions' % (
            ', '.join('%s %.1f' % kv for kv in r['action_ms'].items()), r['simulated_bubble']))
  if r['overlap_warning']:
    print('but ' + r['overlap_warning'])
  print('step: %.4f s; with recording %.4f s (%.3fx)' % (r['step_s'], r['recorded_step_s'], r['recording_cost']))
  if r['recording_cost'] > STRETCHED:
    print('recording stretched the step %.2fx: the picture is not quite the unrecorded step (a noisy machine, or '
          'a stamp the runtime orders: see lingpipe/gpipe/timeline.py); run it again before trusting it'
          % r['recording_cost'])
  print('wrote %s and %s' % (r['png'], r['trace']))
  return r


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal.
  main()
