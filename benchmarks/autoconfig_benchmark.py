r"""The trainer's pipeline choice (--pipeline=auto) against an exhaustive search: every fitting configuration timed.

    python benchmarks/autoconfig_benchmark.py --workloads=dense,transformer --dtypes=float32,bfloat16 --write_docs

For each workload and dtype it times, on this process's 2 logical CPU devices (where the trainer's choice runs),
one training step of every configuration of the grid (K in 1..--devices, M in --micro_batches dividing the batch,
the three remat policies, the four schedules; each cut the planner's balances give), then lets the chooser
(gpipe/planner/auto_config.py: layers and this machine's step_time.Terms measured here, the planner's speed and memory
model) choose under each budget: none, and a tight one (the median of the grid's predicted peaks). The devices
share one allocator, so a budget is the process's: the devices' predicted peaks added up, against the step's
measured allocator peak plus the weights and Adam's two slots. It prints the choice's measured step time over the
grid's best among the configurations that fit the same budget, the time spent choosing against the time the grid
took, and whether the choice's measured peak exceeded its budget; below the table, the terms it measured and how
far the predicted step times were from the measured ones.
"""

import argparse
import json
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
from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.gpipe.planner import auto_config  # pylint: disable=g-import-not-at-top,wrong-import-position
from lingpipe.gpipe.planner import step_time  # pylint: disable=g-import-not-at-top,wrong-import-position
import benchmark_page  # pylint: disable=g-import-not-at-top,wrong-import-position

_SIZES = {'dense': dict(layers=8, width=1024, batch=1024),
          'transformer': dict(layers=8, batch=64, seq_len=32, model_dim=128, hidden_dim=512, heads=4)}


def _Args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workloads', default='dense,transformer', help='Of: %s.' % ', '.join(_SIZES))
  parser.add_argument('--dtypes', default='float32,bfloat16', help='Compute dtypes, each a row.')
  parser.add_argument('--devices', type=int, default=2, help='Logical CPU devices: K goes up to this.')
  parser.add_argument('--micro_batches', default='1,2,4,8,16', help='Values of M in the grid.')
  parser.add_argument('--steps', type=int, default=5, help='Timed steps per configuration (the median is kept).')
  parser.add_argument('--json', default=None, help='Also write every configuration timed here: its fields, '
                      'predicted and measured step seconds and peak bytes.')
  parser.add_argument('--write_docs', action='store_true', help='Write the table into docs/benchmarks.md.')
  return parser.parse_args(argv)


_BUILT = [0]


def _Time(workload, fields, steps):
  """(median step seconds, measured peak bytes: the variables and Adam's slots' bytes plus the step's allocator
  peak above what was allocated before it) of one configuration."""
  _BUILT[0] += 1
  pipe = pipelining_layer.PipeliningLayer.Params().Set(
      name='grid%d' % _BUILT[0], layers=[p.Copy() for p in workload.layers], **fields).Instantiate()
  Step = workloads.TrainStep(pipe, tf.nest.flatten(workload.inputs)[0])  # pylint: disable=invalid-name

  def Once():
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), Step(workload.inputs))
    return time.perf_counter() - start

  Once()
  Once()  # Warm-up.
  seconds = statistics.median(Once() for _ in range(steps))
  weights = sum(v.shape.num_elements() * v.dtype.size for v in pipe.trainable_variables)
  peak = memory_stats.PeakBytes(lambda: Step(workload.inputs), 'CPU:0', 'autoconfig_benchmark')
  return seconds, weights * 3 + peak  # weights, and Adam's two slots of their size


def _ProcessPeak(candidate):
  """The logical devices share one process's allocator: their peaks add up (what the budget is compared with)."""
  return sum(cell.peak for cell in candidate.cells)


def _Row(name, workload, dtype, args, out, timed=None, notes=None):
  shapes = tf.nest.map_structure(lambda t: t.shape.as_list(), workload.inputs)
  micro = tuple(int(m) for m in args.micro_batches.split(','))
  fprop = tf.as_dtype(dtype)
  start = time.perf_counter()  # What the trainer does before it chooses: time the layers and this machine.
  predicted = auto_config.Predict(workload.layers, shapes, args.devices, peak_of=_ProcessPeak, fprop_dtype=fprop,
                                  slots=2)
  predict_s = time.perf_counter() - start
  start = time.perf_counter()
  grid = {}
  for option in predicted.options:
    if option.candidate.num_micro_batches in micro:
      grid[auto_config.Describe(option)] = (option,) + _Time(workload, auto_config.Fields(option), args.steps)
  grid_s = time.perf_counter() - start
  errors = sorted(abs(v[0].step_seconds / v[1] - 1) for v in grid.values())
  if notes is not None:
    notes.append('%s: measured here: %s; predicted step times off by %.0f%% (median), %.0f%% (90th '
                 'percentile) over the %d timed.' % ('%s, %s' % (name, dtype),
                                                     step_time.Describe(predicted.terms),
                                                     100 * errors[len(errors) // 2],
                                                     100 * errors[int(0.9 * (len(errors) - 1))], len(errors)))
  if timed is not None:
    timed.extend(dict(workload=name, dtype=dtype, config=key, fields=auto_config.Fields(v[0]),
                      predicted_s=v[0].step_seconds, measured_s=v[1], predicted_peak=v[0].peak, measured_peak=v[2])
                 for key, v in grid.items())
  peaks = sorted(v[0].peak for v in grid.values())
  rows = []
  for budget_name, budget in (('none', None), ('median peak', peaks[len(peaks) // 2] / (1 - auto_config.MARGIN))):
    start = time.perf_counter()
    choice = auto_config.Choose(predicted.options, args.devices, budget, plain_seconds=predicted.plain_seconds,
                                terms=predicted.terms)
    choose_s = predict_s + time.perf_counter() - start
    key = auto_config.Describe(choice.chosen)
    if key not in grid:  # An M outside the grid's: timed apart.
      grid[key] = (choice.chosen,) + _Time(workload, auto_config.Fields(choice.chosen), args.steps)
    fitting = [v for v in grid.values() if budget is None or v[0].peak <= budget * (1 - auto_config.MARGIN)]
    best_key, best = min(((auto_config.Describe(v[0]), v) for v in fitting), key=lambda kv: kv[1][1])
    chosen_s, chosen_peak = grid[key][1], grid[key][2]
    over = budget is not None and chosen_peak > budget
    rows.append((budget_name, key, chosen_s, best_key, best[1], choose_s, over))
    print('| %s | %s | %s | %s | %s %.3f s | %s %.3f s | %.2f | %.1f s / %.0f s (%.1f%%) | %s |' % (
        name, dtype, budget_name if budget is None else '%s (%.0f MiB)' % (budget_name, budget / 2**20),
        len(fitting), key, chosen_s, best_key, best[1], chosen_s / best[1], choose_s, grid_s,
        100 * choose_s / grid_s, 'yes (%.0f MiB)' % (chosen_peak / 2**20) if over else 'no'), file=out, flush=True)
  return rows


def main(argv=None):
  args = _Args(argv)
  cluster.ConfigureLocalDevices(args.devices)
  timed, notes = [], []
  with benchmark_page.Recording() as printed:
    print('# The trainer\'s pipeline choice against every configuration timed (%s; %d logical devices, M in %s, '
          '%d timed steps each)\n' % (cpu_kernels.DescribeCpu(), args.devices, args.micro_batches, args.steps))
    print('| workload | dtype | budget | fitting | chosen | grid\'s best | chosen / best | choosing / grid | '
          'chosen over budget |')
    print('|---|---|---|---|---|---|---|---|---|')
    for name in args.workloads.split(','):
      for dtype in args.dtypes.split(','):
        workload = workloads.Make(name, dtype=dtype, **_SIZES[name])
        base_name = workload.name[:-len(', ' + dtype)] if workload.name.endswith(', ' + dtype) else workload.name
        _Row(base_name, workload, dtype, args, sys.stdout, timed, notes)
    print()
    for line in notes:
      print('- ' + line)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(timed, f, indent=1)
  if args.write_docs:
    benchmark_page.Write('The pipeline choice against an exhaustive search', printed.Text(),
                         cpu_kernels.DescribeCpu())
  return 0


if __name__ == '__main__':
  sys.exit(main())
