r"""The trainer's pipeline choice (--pipeline=auto) against an exhaustive search: every fitting configuration timed.

    python benchmarks/autoconfig_benchmark.py --workloads=dense,transformer --dtypes=float32,bfloat16 --write_docs

For each workload and dtype it times, on this process's 2 logical CPU devices (where the trainer's choice runs),
one training step of every configuration of the grid (K in 1..--devices, M in --micro_batches dividing the batch,
the three remat policies, the four schedules; each cut the planner's balances give), then lets the chooser
(gpipe/choice/auto_config.py: layers and this machine's step_time.Terms measured here, the planner's speed and memory
model) choose under each budget: none, and a tight one (the median of the grid's predicted peaks). The devices
share one allocator, so a budget is the process's: the devices' predicted peaks added up, against the step's
measured allocator peak plus the weights and Adam's two slots. It prints the choice's measured step time over the
grid's best among the configurations that fit the same budget, the time spent choosing against the time the grid
took, and whether the choice's measured peak exceeded its budget; below the table, the terms it measured and how
far the predicted step times were from the measured ones.

    python benchmarks/autoconfig_benchmark.py --workers=2 --write_docs

With --workers=N the devices are N lingpipe-worker processes instead, each pinned to its own core with one thread
(as one device a host), which this process connects to as the trainer does: the layers, the hand-off between the
workers and the calls are timed on them, and the budget is a worker's: the fullest worker's process peak (this
machine's model of a worker process where it was calibrated, else the cells' allocator peaks), against the
charge each worker's cgroup reached in the configuration's steps above its charge before them (_Workers). The
choice is the
trainer's (auto_config.ChooseFor: predicted, then the best few and the plain model stepped); each configuration's
time is the median over --repeats runs, each run the median of --steps steps, the runs taken in turn over the grid
so that a slow minute of the machine weighs on every configuration alike.
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import workloads

from lingpipe import process_setup  # pylint: disable=g-import-not-at-top,wrong-import-position

process_setup.SetUpProcess()  # Before TensorFlow loads, as the binaries do.
if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal, its start-up notices too.

import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position

from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.core import memory_stats  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.gpipe.choice import step_trials  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.memory import memory_cgroup  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.gpipe.choice import auto_config  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.gpipe.planner import step_time  # pylint: disable=g-import-not-at-top,wrong-import-position
import benchmark_page  # pylint: disable=g-import-not-at-top,wrong-import-position

WORKER_MEMORY = 6 * 2**30  # Each worker's cgroup limit: room for any configuration of the grid, and both fit.
_SIZES = {'dense': dict(layers=8, width=1024, batch=1024),
          'transformer': dict(layers=8, batch=64, seq_len=32, model_dim=128, hidden_dim=512, heads=4)}


def _Args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workloads', default='dense,transformer', help='Of: %s.' % ', '.join(_SIZES))
  parser.add_argument('--dtypes', default='float32,bfloat16', help='Compute dtypes, each a row.')
  parser.add_argument('--devices', type=int, default=2, help='Logical CPU devices: K goes up to this.')
  parser.add_argument('--micro_batches', default='1,2,4,8,16', help='Values of M in the grid.')
  parser.add_argument('--steps', type=int, default=5, help='Timed steps per configuration (the median is kept).')
  parser.add_argument('--repeats', type=int, default=1, help='Runs of the whole grid, in turn; each '
                      "configuration's time is the median of its runs'.")
  parser.add_argument('--workers', type=int, default=0, help='Time on this many pinned lingpipe-worker processes '
                      '(one core each) instead of logical devices in this process.')
  parser.add_argument('--json', default=None, help='Also write every configuration timed here: its fields, '
                      'predicted and measured step seconds and peak bytes.')
  parser.add_argument('--write_docs', action='store_true', help='Write the table into docs/benchmarks.md.')
  parser.add_argument('--timed_grid', default=None, help="A --json file of an earlier run on the same devices: its "
                      'timed configurations are taken from it, not timed again (to check a change of the choice).')
  parser.add_argument('--round', default=None, help=argparse.SUPPRESS)  # A child's: 'configs.json,results.json'.
  return parser.parse_args(argv)


class _LocalDevices:
  """Logical CPU devices of this process: they share one allocator, so a budget is the process's (the devices'
  predicted peaks added up) against the step's measured allocator peak plus the weights and Adam's two slots."""

  def __init__(self, count):
    cluster.ConfigureLocalDevices(count)
    self.count, self.devices = count, None  # None: Predict's and the trials' own first `count` local devices.
    self.what = '%d logical devices' % count

  def PeakOf(self, candidate):
    return sum(cell.peak for cell in candidate.cells)

  def Place(self):
    return contextlib.nullcontext()

  def Time(self, workload, fields, steps):
    """(median step seconds, measured peak bytes) of one configuration."""
    pipe = step_trials.TrialPipe(workload.layers, fields)
    step = step_trials.StepOf(pipe, workload.inputs)
    seconds = _Median(step, steps)
    weights = sum(v.shape.num_elements() * v.dtype.size for v in pipe.trainable_variables)
    peak = memory_stats.PeakBytes(step, 'CPU:0', 'autoconfig_benchmark')
    return seconds, weights * 3 + peak  # weights, and Adam's two slots of their size

  def TimeAll(self, workload, unused_flags_key, fields_list, steps):
    """[(seconds, peak)] of each configuration of `fields_list`, timed once each in turn."""
    return [self.Time(workload, fields, steps) for fields in fields_list]

  def Close(self):
    pass


class _Workers:
  """N lingpipe-worker processes, each pinned to its own core with one thread and in its own memory cgroup,
  connected to as the trainer does. A budget is a worker's: the fullest worker's process peak (this machine's model
  of a worker process, calibrated by the same charge: memory/calibration.py), against the largest charge
  (memory_cgroup.Charge) each worker reached in the configuration's steps, plus Adam's two slots of its weights
  (the steps apply no update)."""

  def __init__(self, count, calibrate=True):
    from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
    from lingpipe.distributed import local_cluster  # pylint: disable=g-import-not-at-top
    from lingpipe.memory import calibration  # pylint: disable=g-import-not-at-top
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < count:
      raise SystemExit('--workers=%d pins each worker to its own core; this process may use %d.' % (count, len(cores)))
    self.count = count
    self.calibration = calibration.LoadOrCalibrate(sys.stdout, ('workers',)) if calibrate else None
    self.workers = local_cluster.LocalCluster(count, pin_cores=[{c} for c in cores[:count]], threads=1,
                                              memory_limit=str(WORKER_MEMORY))  # A cgroup each, to measure by
    self.workers.__enter__()
    self.mesh = remote.Connect(remote.ParseClusterSpec(self.workers.spec_text), cluster.Params(), count)
    self.devices = [self.mesh.Device(k, num_splits=count) for k in range(count)]
    self.pids = [p.pid for p in self.workers.processes]
    self.fresh = [memory_cgroup.Charge(pid) for pid in self.pids]  # each worker's charge, connected to
    self.what = '%d lingpipe-workers pinned to cores %s, one thread each; peaks: %s' % (
        count, ','.join(map(str, cores[:count])),
        'the worker process model measured %s' % self.calibration.measured if self.calibration else
        'the cells\' allocator peaks (no worker process model: measured peaks are not comparable)')

  def PeakOf(self, candidate):
    if self.calibration is None:
      return max(cell.peak for cell in candidate.cells)
    return max(self.calibration.worker.Peak(cell.peak) for cell in candidate.cells)

  def Place(self):
    return cluster.Use(self.mesh)

  def Time(self, workload, fields, steps):
    """(median step seconds, the fullest worker's process peak plus Adam's slots of its weights) of one
    configuration. A worker keeps what earlier configurations left (traced functions, freed memory malloc keeps),
    so its peak is its charge once connected to plus how far above its charge before this configuration was built
    it went."""
    from lingpipe.memory import memory_trials  # pylint: disable=g-import-not-at-top
    before = [memory_cgroup.Charge(pid) for pid in self.pids]
    with memory_trials.Sampler({task: pid for task, pid in enumerate(self.pids)}) as sampler:
      with cluster.Use(self.mesh):
        pipe = step_trials.TrialPipe(workload.layers, fields, self.devices)
      step = step_trials.StepOf(pipe, workload.inputs, self.devices)
      seconds = _Median(step, steps)
    weights = {}
    for v in pipe.trainable_variables:
      task = int(v.device.split('/task:')[1].split('/')[0]) if '/task:' in v.device else 0
      weights[task] = weights.get(task, 0) + v.shape.num_elements() * v.dtype.size
    peaks = [self.fresh[task] + max(sampler.peaks.get(task, 0), before[task]) - before[task] +
             2 * weights.get(task, 0) for task in range(len(self.pids))]
    del step, pipe
    return seconds, max(peaks)

  def TimeAll(self, unused_workload, flags_key, fields_list, steps):
    """[(seconds, peak)] of each configuration of `fields_list`, timed once each in turn by a child process with
    workers of its own: a worker keeps every function traced on it (about 20 MiB a configuration of the dense
    stack), which over three runs of the grid outgrew a 6 GiB worker, and a client cannot connect to new workers."""
    import subprocess  # pylint: disable=g-import-not-at-top
    import tempfile  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory(prefix='autoconfig-round-') as folder:
      configs, results = os.path.join(folder, 'configs.json'), os.path.join(folder, 'results.json')
      with open(configs, 'w') as f:
        json.dump(fields_list, f)
      subprocess.run([sys.executable, os.path.abspath(__file__), '--workers=%d' % self.count,
                      '--workloads=' + flags_key[0], '--dtypes=' + flags_key[1], '--steps=%d' % steps,
                      '--round=%s,%s' % (configs, results)], check=True, stdout=subprocess.DEVNULL)
      with open(results) as f:
        return [tuple(r) for r in json.load(f)]

  def Close(self):
    self.workers.__exit__(None, None, None)


def _Median(step, steps):
  """Median seconds of `steps` calls of step() (its value fetched), after two untimed calls."""
  def Once():
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), step())
    return time.perf_counter() - start

  Once()
  Once()  # Warm-up.
  return statistics.median(Once() for _ in range(steps))


def _Row(name, workload, flags_key, args, place, out, timed=None, notes=None):
  """Times the grid of `workload` (`flags_key`: its workload name and dtype, as the flags give them) and prints its
  rows."""
  dtype = flags_key[1]
  shapes = tf.nest.map_structure(lambda t: t.shape.as_list(), workload.inputs)
  micro = tuple(int(m) for m in args.micro_batches.split(','))
  fprop = tf.as_dtype(dtype)
  with place.Place():
    start = time.perf_counter()  # What the trainer does before it chooses: time the layers and these devices.
    predicted = auto_config.Predict(workload.layers, shapes, place.count, peak_of=place.PeakOf, fprop_dtype=fprop,
                                    slots=2, devices=place.devices)
    predict_s = time.perf_counter() - start
    start = time.perf_counter()
    configs = {}  # Options of one configuration (the same cut from two balances) are timed once.
    for option in predicted.options:
      if option.candidate.num_micro_batches in micro:
        configs.setdefault(repr(sorted(auto_config.Fields(option).items())), []).append(option)
    earlier, grid_s = _Earlier(args.timed_grid, name, dtype)
    runs = {key: [] for key in configs}
    for _ in range(args.repeats):  # In turn: a slow minute weighs on every configuration alike.
      todo = [key for key in configs if key not in earlier]
      times = place.TimeAll(workload, flags_key, [auto_config.Fields(configs[key][0]) for key in todo], args.steps)
      for key, result in zip(todo, times):
        runs[key].append(result)
    grid = {}
    for key, options in configs.items():
      seconds, peak = earlier.get(key) or (statistics.median(r[0] for r in runs[key]), max(r[1] for r in runs[key]))
      grid.update({auto_config.Describe(o): (o, seconds, peak) for o in options})
    grid_s = None if earlier and grid_s is None else (grid_s or 0.0) + time.perf_counter() - start  # None: unknown
    errors = sorted(abs(v[0].step_seconds / v[1] - 1) for v in grid.values())
    if notes is not None:
      notes.append('%s, %s: measured here: %s; predicted step times off by %.0f%% (median), %.0f%% (90th '
                   'percentile) over the %d timed.' % (name, dtype, step_time.Describe(predicted.terms),
                                                       100 * errors[len(errors) // 2],
                                                       100 * errors[int(0.9 * (len(errors) - 1))], len(errors)))
    if timed is not None:
      timed.extend(dict(workload=name, dtype=dtype, config=key, fields=auto_config.Fields(v[0]), grid_s=grid_s,
                        predicted_s=v[0].step_seconds, measured_s=v[1], predicted_peak=v[0].peak,
                        measured_peak=v[2]) for key, v in grid.items())
    peaks = sorted(v[0].peak for v in grid.values())
    rows = []
    for budget_name, budget in (('none', None), ('median peak', peaks[len(peaks) // 2] / (1 - auto_config.MARGIN))):
      start = time.perf_counter()  # The trainer's choice: predicted, then the best few and the plain model stepped.
      choice = auto_config.Choose(predicted.options, place.count, budget, plain_seconds=predicted.plain_seconds,
                                  terms=predicted.terms)
      choice = auto_config.Stepped(choice, predicted.options, workload.layers, shapes, fprop, devices=place.devices)
      choose_s = predict_s + time.perf_counter() - start
      if notes is not None:  # What the trials measured, beside the grid's median of the same configuration.
        notes.append('%s, %s, budget %s: stepped %s.' % (name, dtype, budget_name, '; '.join(
            '%s %s (grid %s)' % (t.label, '%.3f s' % t.seconds if t.seconds else t.error,
                                 '%.3f s' % grid[auto_config.Describe(t.option)][1]
                                 if t.option is not None and auto_config.Describe(t.option) in grid else '-')
            for t in choice.trials)))
      key = auto_config.Describe(choice.chosen)
      if key not in grid:  # An M outside the grid's: timed apart.
        apart = [place.TimeAll(workload, flags_key, [auto_config.Fields(choice.chosen)], args.steps)[0]
                 for _ in range(args.repeats)]
        grid[key] = (choice.chosen, statistics.median(r[0] for r in apart), max(r[1] for r in apart))
      fitting = [v for v in grid.values() if budget is None or v[0].peak <= budget * (1 - auto_config.MARGIN)]
      best_key, best = min(((auto_config.Describe(v[0]), v) for v in fitting), key=lambda kv: kv[1][1])
      chosen_s, chosen_peak = grid[key][1], grid[key][2]
      over = budget is not None and chosen_peak > budget
      rows.append((budget_name, key, chosen_s, best_key, best[1], choose_s, over))
      share = '%.1f s / %.0f s (%.1f%%)' % (choose_s, grid_s, 100 * choose_s / grid_s) if grid_s else (
          '%.1f s / (the grid\'s time not recorded)' % choose_s)
      print('| %s | %s | %s | %s | %s %.3f s | %s %.3f s | %.2f | %s | %s |' % (
          name, dtype, budget_name if budget is None else '%s (%.0f MiB)' % (budget_name, budget / 2**20),
          len(fitting), key, chosen_s, best_key, best[1], chosen_s / best[1], share,
          'yes (%.0f MiB)' % (chosen_peak / 2**20) if over else 'no'), file=out, flush=True)
  return rows


def _Earlier(path, name, dtype):
  """({configuration's key: (seconds, peak)}, the grid's seconds) of workload `name` in `dtype` in a --json file of
  an earlier run (`path`; None: nothing)."""
  if not path:
    return {}, None
  with open(path) as f:
    entries = [e for e in json.load(f) if e['workload'] == name and e['dtype'] == dtype]
  return ({repr(sorted(e['fields'].items())): (e['measured_s'], e['measured_peak']) for e in entries},
          max((e.get('grid_s') or 0.0 for e in entries), default=None))


def _TimeRound(args):
  """A child's round (_Workers.TimeAll): times the configurations of the JSON file on workers of its own."""
  configs, results = args.round.split(',')
  with open(configs) as f:
    fields_list = json.load(f)
  place = _Workers(args.workers, calibrate=False)
  workload = workloads.Make(args.workloads, dtype=args.dtypes, **_SIZES[args.workloads])
  try:
    times = [place.Time(workload, fields, args.steps) for fields in fields_list]
  finally:
    place.Close()
  with open(results, 'w') as f:
    json.dump(times, f)
  return 0


def main(argv=None):
  args = _Args(argv)
  if args.round:
    return _TimeRound(args)
  place = _Workers(args.workers) if args.workers else _LocalDevices(args.devices)
  timed, notes = [], []
  try:
    with benchmark_page.Recording() as printed:
      print('# The trainer\'s pipeline choice against every configuration timed (%s; %s; M in %s; each '
            'configuration the median of %d run(s) of %d timed steps)\n' % (
                cpu_kernels.DescribeCpu(), place.what, args.micro_batches, args.repeats, args.steps))
      print('| workload | dtype | budget | fitting | chosen | grid\'s best | chosen / best | choosing / grid | '
            'chosen over budget |')
      print('|---|---|---|---|---|---|---|---|---|')
      for name in args.workloads.split(','):
        for dtype in args.dtypes.split(','):
          workload = workloads.Make(name, dtype=dtype, **_SIZES[name])
          base_name = workload.name[:-len(', ' + dtype)] if workload.name.endswith(', ' + dtype) else workload.name
          _Row(base_name, workload, (name, dtype), args, place, sys.stdout, timed, notes)
      print()
      for line in notes:
        print('- ' + line)
  finally:
    place.Close()
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(timed, f, indent=1)
  if args.write_docs:
    benchmark_page.Write('The pipeline choice against an exhaustive search' + (
        ' (pinned workers)' if args.workers else ''), printed.Text(), cpu_kernels.DescribeCpu())
  return 0


if __name__ == '__main__':
  sys.exit(main())
