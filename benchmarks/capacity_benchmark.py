r"""The GPipe paper's Table 1 in miniature, measured: the largest model that trains under a memory cap per process.

    python benchmarks/capacity_benchmark.py --cap=1.5GiB --workloads=dense,transformer,long_transformer --write_docs

For each workload (a dense stack of width 2048, the NMT Transformer T(L, 2048, 8) of model depth 512, and a
Transformer encoder T(L, 2048, 8) over 256 tokens x 16, where activations outweigh weights, as in the paper) and each
configuration (the plain model in one process; Pipeline-1: one process, K=1 with remat, M as the planner chooses at
each depth, and M=4; K=2 and K=4 lingpipe-workers, each a process, with a trainer beside them), it finds by bisection
the largest depth that trains 10 steps with every process under the cap (the kernel's memory cgroup, lingpipe's
--memory_limit), and prints it beside the memory planner's largest depth for the same cap, with each process's
measured peak (anonymous and mapped memory, what the kernel cannot reclaim; sampled every 50 ms) beside the
planner's. The ratios compare the largest trainable parameter counts with the plain model's and Pipeline-1's. It
needs a machine whose memory cgroups this user may make children of (root); each trial runs in fresh processes, so
it takes about an hour and a half.
"""

import argparse
import json
import re
import shutil
import sys
import tempfile
from typing import NamedTuple

from lingpipe import process_setup

process_setup.SetUpProcess()  # Before TensorFlow loads, as in the processes it measures.

from lingpipe import binary  # pylint: disable=g-import-not-at-top
from lingpipe.core import byte_sizes  # pylint: disable=g-import-not-at-top
from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
from lingpipe.memory import memory_cgroup  # pylint: disable=g-import-not-at-top
from lingpipe.memory import memory_trials  # pylint: disable=g-import-not-at-top
from lingpipe.memory import calibration as calibration_lib  # pylint: disable=g-import-not-at-top

import benchmark_page  # pylint: disable=g-import-not-at-top


class Workload(NamedTuple):
  model: str
  override: str  # params text of its size, all but the depth
  depth_param: str  # the params path of the depth the bisection varies


WORKLOADS = {
    'dense': Workload('synthetic.DenseStack', 'task.hidden_dim=2048', 'task.num_layers'),
    'transformer': Workload('mt.multilingual.TransformerGPipe',
                            'task.model_dim=512;task.hidden_dim=2048;task.num_heads=8', 'task.num_layers'),
    # The paper's shape: activations outweigh weights (256 tokens x 16, depth 512).
    'long_transformer': Workload('synthetic.LongSequenceTransformer', 'task.hidden_dim=2048;task.num_heads=8',
                                 'task.num_layers'),
}


class Config(NamedTuple):
  name: str
  workers: int  # 0: the trainer holds the model itself
  override: str
  planned_micro_batches: bool = False  # M: what the planner chooses at each depth under the cap (_MicroBatches)


CONFIGS = {
    'plain': Config('plain', 0, 'task.network.num_splits=1;task.network.num_micro_batches=1;'
                    "task.network.remat='never'"),
    'pipeline-1': Config('Pipeline-1 (K=1, M planned, remat)', 0,
                         "task.network.num_splits=1;task.network.remat='always'", planned_micro_batches=True),
    # Re-computed one layer at a time (layer_remat.py): each layer's input is kept, one layer's activations live.
    'pipeline-1-layer': Config('Pipeline-1 (K=1, M planned, per layer)', 0,
                               "task.network.num_splits=1;task.network.remat='per_layer'", planned_micro_batches=True),
    # M=4 holds a gradient sum beside the weights where M=1 is the plain model: what the planner picks for the
    # dense stack.
    'pipeline-1-m4': Config('Pipeline-1 (K=1, M=4, remat)', 0, 'task.network.num_splits=1;'
                            "task.network.num_micro_batches=4;task.network.remat='always'"),
    'k2': Config('K=2 workers (M=4, remat)', 2, 'task.network.num_splits=2;task.network.num_micro_batches=4;'
                 "task.network.remat='always'"),
    'k4': Config('K=4 workers (M=4, remat)', 4, 'task.network.num_splits=4;task.network.num_micro_batches=4;'
                 "task.network.remat='always'"),
}
_COMMON = ("task.network.schedule='gpipe';task.network.balance='uniform';task.train.save_interval_steps=1000000;"
           'task.train.log_interval_steps=1')


def _WorkerPeaks(peaks):
  """'largest peak 1234 MiB (worker 1)' of the largest worker peak in {process: bytes}."""
  workers = {k: v for k, v in peaks.items() if k.startswith('worker')}
  if not workers:
    return 'peaks not measured'
  name = max(workers, key=workers.get)
  return 'largest peak %.0f MiB (%s)' % (workers[name] / 2**20, name)


def _MicroBatches(workload, config, depth, planning):
  """The M the planner chooses for `config` at `depth` under planning = (cap, calibration): of the M that divide
  the batch, the fastest it predicts within the cap, else the one with the lowest predicted peak."""
  cap, calibration = planning
  override = ';'.join([workload.override, '%s=%d' % (workload.depth_param, depth), config.override, _COMMON])
  candidates = calibration_lib.PlannerCandidates(workload.model, override, micro_batches=(1, 2, 4, 8, 16, 32))
  peak = lambda c: calibration.trainer.Peak(sum(cell.peak for cell in c.cells))
  fitting = [c for c in candidates if peak(c) <= cap]
  best = max(fitting, key=lambda c: c.speedup) if fitting else min(candidates, key=peak)
  return best.num_micro_batches


def _Override(workload, config, depth, planning):
  """The params override of `workload` at `depth` in `config`, as every trial runs it."""
  parts = [workload.override, '%s=%d' % (workload.depth_param, depth), config.override, _COMMON]
  if config.planned_micro_batches:
    parts.append('task.network.num_micro_batches=%d' % _MicroBatches(workload, config, depth, planning))
  return ';'.join(parts)


def Bisect(workload, config, planning, steps, scratch, first, log):
  """(largest depth that trains, its Trial, the depth that failed above it): from `first`, doubling up or halving
  down until a depth that trains and one that does not are found, then bisecting."""
  tried = {}

  def Try(depth):
    if depth not in tried:
      override = _Override(workload, config, depth, planning)
      tried[depth] = memory_trials.Run(workload.model, override, config.workers, planning[0], steps, scratch)
      micro = re.search(r'num_micro_batches=(\d+)', override).group(1)
      log('  %-36s depth %3d, M=%s: %s in %.0f s; peaks %s' % (
          config.name, depth, micro, 'trained' if tried[depth].ok else 'failed', tried[depth].seconds, ', '.join(
              '%s %.0f MiB' % (k, v / 2**20) for k, v in sorted(tried[depth].peaks.items()))))
    return tried[depth].ok

  lo, hi = None, None
  depth = max(1, first)
  while lo is None or hi is None:
    if Try(depth):
      lo = depth
      if hi is None:
        depth *= 2
    else:
      hi = depth
      if depth == 1:
        return 0, None, 1
      if lo is None:
        depth = max(1, depth // 2)
    if lo is not None and hi is None and depth > 512:
      break
  while hi is not None and hi - lo > 1:
    middle = (lo + hi) // 2
    if Try(middle):
      lo = middle
    else:
      hi = middle
  return lo, tried[lo], hi


def Predicted(workload, config, depth, planning):
  """The planner's peak of each process (memory/calibration.py) for `workload` at `depth` in `config`."""
  calibration = planning[1]
  override = _Override(workload, config, depth, planning)
  peaks = calibration_lib.DevicePeaks(workload.model, override)
  if not config.workers:
    return {'trainer': calibration.trainer.Peak(sum(peaks))}
  return dict({'worker %d' % i: calibration.worker.Peak(p) for i, p in enumerate(peaks)},
              trainer=calibration.client.Peak(depth))


def PlannedDepth(workload, config, planning, limit=400):
  """The largest depth whose every process the planner predicts within the cap (bisection on the prediction)."""
  fits = lambda d: max(Predicted(workload, config, d, planning).values()) <= planning[0]
  lo = max(1, config.workers)  # At least a layer per cell.
  if not fits(lo):
    return 0
  hi = lo * 2
  while hi <= limit and fits(hi):
    lo, hi = hi, hi * 2
  while hi - lo > 1:
    middle = (lo + hi) // 2
    lo, hi = (middle, hi) if fits(middle) else (lo, middle)
  return lo


def Params(workload, config, depth):
  """Trainable parameters of `workload` at `depth` (an abstract build; nothing allocated)."""
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  from lingpipe.core import base_layer  # pylint: disable=g-import-not-at-top
  p = run_params.BuildModelParams(workload.model, override=';'.join([
      workload.override, '%s=%d' % (workload.depth_param, depth), config.override]))
  with base_layer.AbstractVariables():
    return base_layer.NumParams(p.task.Instantiate())


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--cap', default='1.5GiB', help='Memory cap of every process.')
  parser.add_argument('--workloads', default='dense,transformer,long_transformer',
                      help='Of: %s.' % ', '.join(WORKLOADS))
  parser.add_argument('--configs', default='plain,pipeline-1,pipeline-1-m4,k2,k4',
                      help='Of: %s.' % ', '.join(CONFIGS))
  parser.add_argument('--steps', type=int, default=10, help='Steps a trial trains.')
  parser.add_argument('--first', default='dense=12,transformer=4,long_transformer=4',
                      help='First depth tried per workload (plain).')
  parser.add_argument('--scratch', default=None, help='Where trial logdirs go (default: a temporary folder).')
  parser.add_argument('--json', default=None, help='Also write the results here.')
  parser.add_argument('--save_restore_eval', type=int, default=1, help='1: also measure the peaks while the '
                      'largest pipelined model (beside the most workers) saves, resumes and evaluates.')
  parser.add_argument('--write_docs', action='store_true', help='Write the table into docs/benchmarks.md.')
  args = parser.parse_args(argv)
  cap = byte_sizes.Parse(args.cap, '--cap')
  if memory_cgroup.OwnCgroup()[1] is None:
    print('capacity_benchmark: error: this machine has no memory cgroup to cap processes with.', file=sys.stderr)
    return 1
  first = dict((k, int(v)) for k, v in (item.split('=') for item in args.first.split(',')))
  calibration = calibration_lib.LoadOrCalibrate()
  planning = (cap, calibration)
  scratch = args.scratch or tempfile.mkdtemp(prefix='lingpipe-capacity-')
  results = []
  with benchmark_page.Recording() as printed:
    print('# Largest depth that trains %d steps with every process under %s (%s)' % (
        args.steps, byte_sizes.Format(cap), cpu_kernels.DescribeCpu()))
    for name in args.workloads.split(','):
      workload = WORKLOADS[name]
      print('\n## %s: %s, %s' % (name, workload.model, workload.override))
      plain_params, start = None, first.get(name, 8)
      for key in args.configs.split(','):
        config = CONFIGS[key]
        depth, trial, failed = Bisect(workload, config, planning, args.steps, scratch, start,
                                      lambda line: print(line, flush=True))
        params = Params(workload, config, depth) if depth else 0
        plain_params = plain_params or params
        planned = PlannedDepth(workload, config, planning)
        predicted = Predicted(workload, config, depth, planning) if depth else {}
        micro = re.search(r'num_micro_batches=(\d+)', _Override(workload, config, max(depth, 1), planning)).group(1)
        results.append(dict(workload=name, config=key, depth=depth, failed_at=failed, params=params, micro=int(micro),
                            ratio=params / plain_params if plain_params else None,
                            peaks=trial.peaks if trial else {}, planned_depth=planned, predicted=predicted))
        start = max(depth, 1)
      pipelined = [r for r in results if r['workload'] == name and CONFIGS[r['config']].workers and r['depth']]
      if pipelined and args.save_restore_eval:  # The trainer's peak should not grow with the model it saves.
        r = max(pipelined, key=lambda r: CONFIGS[r['config']].workers)
        config = CONFIGS[r['config']]
        override = _Override(workload, config, r['depth'], planning)
        phases = memory_trials.SaveRestoreEval(workload.model, override, config.workers, cap, args.steps, scratch)
        r['trainer_phases'] = dict(phases, depth=r['depth'])
        print('  %s, depth %d (the fixed cost of a trainer beside workers: %.0f MiB):' % (
            config.name, r['depth'], calibration.client.intercept / 2**20))
        for phase, peaks in phases.items():
          print('    %-16s %s' % (phase, 'failed' if peaks is None else 'trainer peak %.0f MiB, workers\' %s' % (
              peaks.get('trainer', 0) / 2**20, _WorkerPeaks(peaks))))
      print('\n| config | M | largest depth (next failed) | planner\'s largest | parameters | over plain | over '
            'Pipeline-1 | peak per process, measured / planner (MiB) |')
      print('|---|---|---|---|---|---|---|---|')
      rows = [r for r in results if r['workload'] == name]
      pipeline_1 = next((r['params'] for r in rows if r['config'] == 'pipeline-1'), 0)
      for r in rows:
        print('| %s | %d | %d (%d) | %d | %.1fM | %.2f | %s | %s |' % (
            CONFIGS[r['config']].name, r['micro'], r['depth'], r['failed_at'], r['planned_depth'], r['params'] / 1e6,
            r['ratio'] or 0, '%.2f' % (r['params'] / pipeline_1) if pipeline_1 else '-', ', '.join(
                '%s %.0f / %.0f' % (k, v / 2**20, r['predicted'].get(k, 0) / 2**20)
                for k, v in sorted(r['peaks'].items()))))
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=2)
  if args.write_docs:
    benchmark_page.Write('Capacity under a memory cap per process', printed.Text(), cpu_kernels.DescribeCpu())
  if not args.scratch:
    shutil.rmtree(scratch, ignore_errors=True)
  return 0


if __name__ == '__main__':
  binary.QuietTool()
  sys.exit(main())
