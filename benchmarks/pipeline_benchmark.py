r"""GPipe benchmark: throughput over K and M (the paper's Table 1), remat memory and cost, time to first step.

    python benchmarks/pipeline_benchmark.py --out=/tmp/pipeline_benchmark.json
    python benchmarks/pipeline_benchmark.py --quick        # fewer configurations, for a smoke run
    python benchmarks/pipeline_benchmark.py --sections=table1 --workload=dense --batch=2048 --remat=never
    python benchmarks/pipeline_benchmark.py --sections=precision --dtype=float32,bfloat16

Everything is measured in one run, side by side, on logical CPU devices with one intra-op thread each and the trainer's
inter-op threads ("one core = one accelerator"), so the ratios are comparable even on a noisy shared machine; only
section onecore (and multiprocess) start child processes. A training step here is the forward and backward pass
(gradients of all weights); the optimizer update is the same for every configuration.

Tables:
  1. normalized training throughput for K in {1,2,4} x M in {1,2,4,8,32}, for a Transformer stack and a conv
     stack (or --workload with its sizes, benchmarks/workloads.py; remat --remat); 1.0 is the same model without any
     pipeline (SequentialLayer), measured in the same run; then, for each K > 1, the speed-up over the plain model
     factored into the one-cell pipeline's cost, the micro-batch efficiency of one device (K=1 at M against K=1
     at M=1) and the schedule's gain (K at M against K=1 at M, beside its ideal), workloads.Decomposition;
  2. K=2 speed-up over K=1 at the same M beside the ideal K*M/(M+K-1) (this machine has 2 cores), against K=1
     in this process and (section onecore) against K=1 in a child process pinned to one core with one thread.
     Neither isolates the pipeline: in one process a logical device is not one core, since every device's ops
     share the inter-op threads, so K=1 here already uses both cores (the first comparison charges that to the
     pipeline) and K=2 lends a waiting cell's core to the busy one in the bubble (the second credits that to the
     pipeline; its M=1 row, where no pipelining is possible, shows how much). The comparison with one device
     per core, each cell in its own pinned process, is section multiprocess;
  3. K=1, M=1 pipeline overhead against the plain model (remat never and always);
  4. peak memory (get_memory_info) and step time per remat policy, with the analytic bound for remat=always and
     the memory planner's prediction; and (section schedules) per schedule x remat, against gpipe, for the dense
     stack at batch 2048 and Table 1's Transformer (or --workload), K=2, M=8 (benchmarks/schedule_section.py);
  5. time to first step (trace + first run) of a 12-layer Transformer at K=4 for M=4 and M=32, per remat policy;
  6. the machine's own ceiling: two independent copies of the plain model on two devices in one step against
     one copy, i.e. the best any 2-way split can do here (shared caches, memory bandwidth, clock boost);
  7. the CIFAR-10 default model, AmoebaNet-D(6, 32) at batch 64: plain, and K=2 with M=8 (images/s);
  8. (--sections=multiprocess) K=2 over two lingpipe-worker processes pinned to one core each, against one pinned
     process running the whole model (benchmarks/multiprocess_benchmark.py, in its own processes);
  9. (--sections=precision) float32 and the other --dtype side by side, plain and pipelined, with peak memory and
     Keras's mixed_bfloat16 beside lingpipe's bfloat16 (benchmarks/precision_section.py).

--dtype (a comma-separated list) is the layers' compute dtype (fprop_dtype; weights stay float32): sections 1 and
4 run once per dtype, each speed-up against the plain model in the same dtype; the others run in the first.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

from lingpipe import process_setup  # pylint: disable=g-import-not-at-top,wrong-import-position

process_setup.SetUpProcess()  # Before TensorFlow loads, as the binaries do.

from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
from lingpipe.core import memory_stats  # pylint: disable=g-import-not-at-top
from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top

NUM_DEVICES = 4


def _Args():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', default='pipeline_benchmark.json', help='Where to write the JSON results.')
  parser.add_argument('--write_docs', action='store_true', help='Also write the printed tables into '
                      'docs/benchmarks.md, with this command, the commit, the CPU and the date (benchmark_page.py).')
  parser.add_argument('--quick', action='store_true', help='Fewer configurations and steps.')
  parser.add_argument('--steps', type=int, default=5, help='Timed steps per configuration (median is kept).')
  parser.add_argument('--inter_op', type=int, default=None,
                      help='Inter-op threads (default: the trainer\'s, cluster.DefaultInterOpThreads).')
  parser.add_argument('--sections', default='table1,onecore,ceiling,overhead,remat,schedules,ttfs,amoebanet',
                      help='Comma-separated sections to run: table1, onecore, ceiling, overhead, remat, schedules, '
                      'ttfs, amoebanet, multiprocess, precision.')
  parser.add_argument('--precision_amoebanet', action='store_true',
                      help='The precision section also times AmoebaNet-D(6, 32) (slow).')
  parser.add_argument('--remat', default='always', choices=['always', 'except_last', 'never', 'per_layer'],
                      help="Table 1's re-materialization policy.")
  workloads.AddFlags(parser, default=None)  # None: Table 1's Transformer and conv stacks.
  parser.add_argument('--ks', default=None, help=argparse.SUPPRESS)  # Table 1's K values (the onecore child).
  parser.add_argument('--pin_core', type=int, default=None, help=argparse.SUPPRESS)  # The onecore child.
  return parser.parse_args()


ARGS = _Args()
if ARGS.pin_core is not None and hasattr(os, 'sched_setaffinity'):  # Linux; elsewhere one thread, unpinned.
  os.sched_setaffinity(0, {ARGS.pin_core})
cluster.ConfigureLocalDevices(NUM_DEVICES, intra_op_threads=1, inter_op_threads=ARGS.inter_op)

import numpy as np  # pylint: disable=g-import-not-at-top,g-bad-import-order
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from lingpipe.core import context  # pylint: disable=g-import-not-at-top
from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
from lingpipe.gpipe import schedule  # pylint: disable=g-import-not-at-top
from lingpipe.gpipe.engine import remat as remat_lib  # pylint: disable=g-import-not-at-top
from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
from lingpipe.gpipe.planner import partition  # pylint: disable=g-import-not-at-top
from lingpipe.layers import linear  # pylint: disable=g-import-not-at-top
from lingpipe.layers import sequential  # pylint: disable=g-import-not-at-top


Model = workloads.Workload  # name, layers (layer Params), inputs


def Models():
  """The workload of --workload, or Table 1's Transformer and conv stacks, in each dtype of --dtype."""
  return [model for dtype in workloads.Dtypes(ARGS) for model in (
      [workloads.FromArgs(ARGS, dtype=dtype)] if ARGS.workload else [TransformerStack(dtype=dtype),
                                                                     ConvStack(dtype)])]


def TransformerStack(num_layers=8, batch=64, dtype=None):
  return workloads.Make('transformer', dtype=dtype or workloads.Dtypes(ARGS)[0], layers=num_layers, batch=batch)


def ConvStack(dtype=None):
  return workloads.Make('conv', dtype=dtype or workloads.Dtypes(ARGS)[0])


def AmoebaNet(num_cells=6, filters=32, batch=64):
  from lingpipe.tasks.image import amoebanet  # pylint: disable=g-import-not-at-top
  layers, _ = amoebanet.AmoebaNetLayers(num_cells, filters)
  inputs = tf.constant(np.random.RandomState(0).normal(size=(batch, 32, 32, 3)), tf.float32)
  return Model('AmoebaNet-D(%d, %d), batch %d of 32x32' % (num_cells, filters, batch), layers, inputs)


def AmoebaNetThroughput():
  model = AmoebaNet()
  print('\n## %s: training throughput' % model.name)
  out = SideBySide(model, {'plain': (None, 1, 'never'), 'K=2,M=8': (2, 8, 'always'),
                           'K=2,M=8 never': (2, 8, 'never')}, ARGS.steps)
  for name, r in out.items():
    print('%-14s %7.1f images/s  step %.3fx plain' % (name, r['examples_per_s'], r['step_s'] / out['plain']['step_s']),
          flush=True)
  return out


def MlpStack(num_layers=32, batch=2048, dim=256):
  """The remat section's MLP, in --dtype's first dtype."""
  layer = linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim, activation='tanh')
  inputs = tf.constant(np.random.RandomState(0).normal(size=(batch, dim)), tf.float32)
  return workloads.InDtype(Model('tanh MLP %d x %d, batch %d' % (num_layers, dim, batch),
                                 [layer.Copy() for _ in range(num_layers)], inputs), workloads.Dtypes(ARGS)[0])


_COUNTER = [0]


def Build(model, k=None, m=1, remat='never'):
  """The plain SequentialLayer (k=None) or a PipeliningLayer with K=k, M=m."""
  _COUNTER[0] += 1
  name = 'net%d' % _COUNTER[0]
  if k is None:
    return sequential.SequentialLayer.Params().Set(name=name, sub=[l.Copy() for l in model.layers]).Instantiate()
  return pipelining_layer.PipeliningLayer.Params().Set(
      name=name, layers=[l.Copy() for l in model.layers], num_splits=k, num_micro_batches=m,
      remat=remat).Instantiate()


def StepFunction(layer):

  @tf.function(autograph=False)
  def Step(inputs):
    with tf.GradientTape() as tape:
      with context.Training(True):
        out = layer.FProp(inputs)
      x = out.x if isinstance(out, dict) else out
      loss = tf.reduce_mean(tf.square(tf.cast(x, tf.float32)))
    return loss, tape.gradient(loss, layer.trainable_variables)

  return Step


def TimedStep(step, inputs):
  """Seconds for one step, outputs fetched."""
  start = time.perf_counter()
  tf.nest.map_structure(lambda t: t.numpy(), step(inputs))
  return time.perf_counter() - start


def PeakMiB(step, inputs):
  """Peak memory of one step above what was allocated before it (on CPU one allocator for all logical devices;
  ConfigureLocalDevices above enabled its statistics)."""
  return memory_stats.PeakBytes(lambda: step(inputs), 'CPU:0', 'The remat section') / 2**20


def Measure(model, k=None, m=1, remat='never', steps=None):
  """{'step_s', 'first_step_s', 'trace_s', 'first_run_s', 'examples_per_s'} of one configuration. The first step
  is tracing (the step function's get_concrete_function: the cells, their gradients, the loops) + its first run
  (graph optimization, lowering the loops, instantiating each cell's functions on its device, one step)."""
  steps = steps or ARGS.steps
  step = StepFunction(Build(model, k, m, remat))
  start = time.perf_counter()
  step.get_concrete_function(model.inputs)
  trace = time.perf_counter() - start
  first = TimedStep(step, model.inputs)
  step(model.inputs)  # Warm-up.
  times = [TimedStep(step, model.inputs) for _ in range(steps)]
  batch = tf.nest.flatten(model.inputs)[0].shape[0]
  result = dict(step_s=statistics.median(times), first_step_s=trace + first, trace_s=trace, first_run_s=first)
  result['examples_per_s'] = batch / result['step_s']
  return result


def SideBySide(model, configs, rounds):
  """{name: Measure-like result} for configs {name: (k, m, remat)}, built first, then timed in alternation, one
  step of each per round, so that a change in the machine's speed reaches every configuration alike."""
  steps = {name: StepFunction(Build(model, *config)) for name, config in configs.items()}
  for step in steps.values():
    step(model.inputs)
    step(model.inputs)  # Warm-up.
  times = {name: [] for name in steps}
  for _ in range(rounds):
    for name, step in steps.items():
      times[name].append(TimedStep(step, model.inputs))
  batch = tf.nest.flatten(model.inputs)[0].shape[0]
  results = {}
  for name, step in steps.items():
    step_s = statistics.median(times[name])
    results[name] = dict(step_s=step_s, examples_per_s=batch / step_s, peak_mib=PeakMiB(step, model.inputs))
  return results


def Table1(model, ks, ms, remat='always'):
  plain = Measure(model)
  rows = {'plain': plain}
  print('\n## %s, remat %s: normalized training throughput (plain model = 1.00, %.1f examples/s)' % (
      model.name, remat, plain['examples_per_s']))
  print('%-6s' % 'K' + ''.join('%9s' % ('M=%d' % m) for m in ms))
  for k in ks:
    line = '%-6s' % ('K=%d' % k)
    for m in ms:
      r = Measure(model, k, m, remat=remat)
      rows['K=%d,M=%d' % (k, m)] = r
      line += '%9.2f' % (r['examples_per_s'] / plain['examples_per_s'])
    print(line, flush=True)
  return rows


def Speedups(rows, ms, ceiling=None, one_core=None, k=2):
  """K=2 over K=1 at the same M, against the ideal K*M/(M+K-1): with K=1 measured in this process and, when
  `one_core` (Table 1 rows of a process pinned to one core) is given, with K=1 on one core; and, when the
  machine's two-device `ceiling` is known, against the ideal scaled by ceiling/K (what this hardware allows)."""
  print('\n## K=%d speed-up over K=1 at the same M (remat %s), beside the ideal K*M/(M+K-1)' % (k, ARGS.remat))
  print('%-4s %6s | %-19s | %-19s | %s' % ('', '', 'K=1 in this process', 'K=1 on one core',
                                          'machine ideal' if ceiling else ''))
  print('%-4s %6s | %9s %9s | %9s %9s |' % ('M', 'ideal', 'speed-up', 'ratio', 'speed-up', 'ratio') +
        (' %9s %9s' % ('ideal', 'ratio') if ceiling else ''))
  out = {}
  for m in ms:
    k2 = rows['K=%d,M=%d' % (k, m)]['examples_per_s']
    measured = k2 / rows['K=1,M=%d' % m]['examples_per_s']
    ideal = schedule.IdealSpeedup(m, k)
    out[m] = dict(measured=measured, ideal=ideal, ratio=measured / ideal)
    line = '%-4d %6.2f | %9.2f %9.2f |' % (m, ideal, measured, measured / ideal)
    if one_core:
      alone = k2 / one_core['K=1,M=%d' % m]['examples_per_s']
      out[m].update(measured_vs_one_core=alone, ratio_vs_one_core=alone / ideal)
      line += ' %9.2f %9.2f |' % (alone, alone / ideal)
    else:
      line += ' %19s |' % '-'
    if ceiling:
      machine = ideal * ceiling / k
      out[m].update(machine_ideal=machine, machine_ratio=measured / machine)
      line += ' %9.2f %9.2f' % (machine, measured / machine)
    print(line, flush=True)
  if one_core:
    print('plain model, this process / one core: %.2fx (what one device gains from the second core by itself)' %
          (rows['plain']['examples_per_s'] / one_core['plain']['examples_per_s']))
  return out


def OneCoreTable1():
  """Table 1's K=1 rows (and the plain model) measured by a child process pinned to core 0 with one thread."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, 'one_core.json')
    command = [sys.executable, os.path.abspath(__file__), '--sections=table1', '--ks=1', '--inter_op=1',
               '--pin_core=0', '--steps=%d' % ARGS.steps, '--out=%s' % out, '--remat=' + ARGS.remat] + (
                   ['--quick'] if ARGS.quick else []) + (workloads.SizeFlags(ARGS) if ARGS.workload else []) + (
                       ['--batch=%d' % ARGS.batch] if ARGS.batch else []) + ['--dtype=' + ARGS.dtype]
    print('\n## K=1 on one core (a child process pinned to core 0, one thread)', flush=True)
    subprocess.run(command, check=True)
    with open(out) as f:
      return json.load(f)['table1']


def Overhead(model):
  configs = {'plain': (None, 1, 'never'), 'never': (1, 1, 'never'), 'always': (1, 1, 'always')}
  results = SideBySide(model, configs, rounds=ARGS.steps * 2)
  out = {}
  print('\n## K=1, M=1 pipeline step time / plain step time (%s), side by side' % model.name)
  for remat in ('never', 'always'):
    out[remat] = results[remat]['step_s'] / results['plain']['step_s']
    print('remat=%-8s %.3fx' % (remat, out[remat]), flush=True)
  return out


def RematTable(model, k, m):
  print('\n## Remat policies, %s, K=%d, M=%d: peak memory above the weights and step time (side by side)' % (
      model.name, k, m))
  batch, dim = model.inputs.shape
  num_layers = len(model.layers)
  row_bytes = dim * model.inputs.dtype.size
  # Analytic bound for remat=always: the inputs, outputs and their gradients for the whole batch (boundaries of
  # all micro-batches), plus one micro-batch re-computed through one cell (each layer keeps its input and output),
  # plus the weight gradients and their accumulators (2 x weights).
  boundary = 4 * batch * row_bytes * k
  one_cell = 2 * (num_layers // k + 1) * (batch // m) * row_bytes
  weights = num_layers * (dim * dim + dim) * 4
  bound = (boundary + one_cell + 2 * weights) / 2**20
  policies = ('never', 'except_last', 'always')
  out = SideBySide(model, {remat: (k, m, remat) for remat in policies}, rounds=2 * ARGS.steps)
  layers = memory_plan.DescribeLayers(model.layers, model.inputs.shape.as_list())
  counts = partition.BalanceByCost([1] * num_layers, k)  # Build() cuts uniformly.
  for remat in policies:
    # The planner's prediction of what a step adds to the weights: on CPU one allocator serves all devices.
    cells = memory_plan.CellMemories(layers, counts, m, remat)
    predicted = memory_plan.StepBytes(cells) / 2**20
    out[remat]['predicted_mib'] = predicted
    print('remat=%-12s peak %7.1f MiB (planner: %7.1f MiB, %.2fx)   step %.3f s' % (
        remat, out[remat]['peak_mib'], predicted, predicted / out[remat]['peak_mib'], out[remat]['step_s']),
        flush=True)
  out['bound_mib'] = bound
  out['always_vs_bound'] = out['always']['peak_mib'] / bound
  out['never_vs_always_memory'] = out['never']['peak_mib'] / out['always']['peak_mib']
  out['always_vs_never_time'] = out['always']['step_s'] / out['never']['step_s']
  print('analytic bound for always: %.1f MiB; always/bound %.2f; never/always memory %.2fx; always/never time '
        '%.2fx' % (bound, out['always_vs_bound'], out['never_vs_always_memory'], out['always_vs_never_time']))
  return out


def Ceiling(model):
  """Throughput of two independent plain models on CPU:0 and CPU:1 in one step, over one model."""
  single = Measure(model)
  layers = [Build(model) for _ in range(2)]
  devices = cluster.LocalDevices()[:2]

  @tf.function(autograph=False)
  def Both(inputs):
    outs = []
    for layer, device in zip(layers, devices):
      with tf.device(device):
        with tf.GradientTape() as tape:
          with context.Training(True):
            out = layer.FProp(inputs)
          x = out.x if isinstance(out, dict) else out
          loss = tf.reduce_mean(tf.square(x))
        outs.append((loss, tape.gradient(loss, layer.trainable_variables)))
    return outs

  Both(model.inputs)
  times = [TimedStep(Both, model.inputs) for _ in range(ARGS.steps)]
  scaling = 2 * single['step_s'] / statistics.median(times)
  print('%s: 2 independent copies on 2 devices run %.2fx the throughput of one' % (model.name, scaling),
        flush=True)
  return scaling


def TimeToFirstStep(ms, remats=remat_lib.POLICIES):
  """{remat: {M: {total_s, trace_s, first_run_s, step_s}}} of a 12-layer Transformer at K=4 (Measure's first step,
  its parts, a later step). Every policy's passes loop over their steady ticks ('never' keeps each forward's
  activations as data on a stack, step_facts.StepFacts.saves)."""
  print('\n## Time to first step, 12-layer Transformer, K=4: trace + first run (a later step in brackets)')
  print('%-13s' % 'remat' + ''.join('%28s' % ('M=%d' % m) for m in ms))
  out = {}
  for remat in remats:
    for m in ms:
      r = Measure(TransformerStack(num_layers=12, batch=64), 4, m, remat, steps=2)
      out.setdefault(remat, {})[m] = dict(total_s=r['first_step_s'], trace_s=r['trace_s'],
                                          first_run_s=r['first_run_s'], step_s=r['step_s'])
    print('%-13s' % remat + ''.join('%6.2fs = %5.2f + %5.2f (%4.2f)' % tuple(
        out[remat][m][f] for f in ('total_s', 'trace_s', 'first_run_s', 'step_s')) for m in ms), flush=True)
  return out


def main():
  ks, ms = ([1, 2], [1, 4, 8]) if ARGS.quick else ([1, 2, 4], [1, 2, 4, 8, 32])
  if ARGS.ks:
    ks = [int(k) for k in ARGS.ks.split(',')]
  results = dict(devices=cluster.LocalDevices()[:NUM_DEVICES], steps=ARGS.steps, quick=ARGS.quick,
                 inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
                 kernels=cpu_kernels.Describe())
  results['cpu'] = cpu_kernels.DescribeCpu()
  print('CPU: %s' % results['cpu'])
  sections = ARGS.sections.split(',')
  if 'table1' in sections:
    results['table1'] = {}
    one_core = OneCoreTable1() if 'onecore' in sections else None
    if one_core:
      results['table1_k1_one_core'] = one_core
    for model in Models():
      ceiling = None
      if 'ceiling' in sections:
        print('\n## Two-device ceiling of this machine')
        ceiling = results.setdefault('two_device_ceiling', {})[model.name] = Ceiling(model)
      rows = Table1(model, ks, ms, ARGS.remat)
      results['table1'][model.name] = rows
      if 2 in ks:
        results.setdefault('speedup_k2', {})[model.name] = Speedups(rows, ms, ceiling,
                                                                    one_core and one_core[model.name])
      if 1 in ks:
        for k in (k for k in ks if k > 1):
          print('\n## Where the time goes, K=%d (step times side by side in this process)' % k)
          results.setdefault('decomposition', {}).setdefault(model.name, {})[k] = workloads.Decomposition(
              rows['plain']['step_s'], {key: r['step_s'] for key, r in rows.items()}, k, ms)
  elif 'ceiling' in sections:
    print('\n## Two-device ceiling of this machine')
    results['two_device_ceiling'] = {m.name: Ceiling(m) for m in Models()}
  if 'overhead' in sections:
    results['overhead_k1m1'] = Overhead(TransformerStack())
  if 'remat' in sections:
    results['remat'] = RematTable(MlpStack(), 2, 8)
  if 'schedules' in sections:
    models = Models() if ARGS.workload else [workloads.Make('dense', dtype=workloads.Dtypes(ARGS)[0], batch=2048),
                                             TransformerStack()]
    import schedule_section  # pylint: disable=g-import-not-at-top
    results['schedules'] = {model.name: schedule_section.Run(sys.modules[__name__], model, 2, 8, ARGS.steps)
                            for model in models}
  if 'ttfs' in sections:
    results['time_to_first_step'] = TimeToFirstStep([4, 32] if not ARGS.quick else [4, 8])
  if 'amoebanet' in sections:
    results['amoebanet'] = AmoebaNetThroughput()
  if 'multiprocess' in sections:
    import multiprocess_benchmark  # pylint: disable=g-import-not-at-top
    batches = [ARGS.batch or workloads.DEFAULTS[ARGS.workload]['batch']] if ARGS.workload else [64, 256]
    flags = workloads.SizeFlags(ARGS) if ARGS.workload else ['--workload=transformer']
    results['multiprocess'] = {'batch_%d' % b: multiprocess_benchmark.Run(steps=ARGS.steps, batch=b, remat=ARGS.remat,
                                                                          workload_flags=flags) for b in batches}
  if 'precision' in sections:
    import precision_section  # pylint: disable=g-import-not-at-top
    results['precision'] = precision_section.Run(sys.modules[__name__], workloads.Dtypes(ARGS),
                                                 ARGS.precision_amoebanet)
  with open(ARGS.out, 'w') as f:
    json.dump(results, f, indent=2, sort_keys=True)
  print('\nWrote %s' % ARGS.out)


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal.
  import benchmark_page  # pylint: disable=g-import-not-at-top
  with benchmark_page.Recording() as recording:
    main()
  if ARGS.write_docs:
    benchmark_page.Write('Pipeline benchmark: %s' % ARGS.sections, recording.Text(), cpu_kernels.DescribeCpu())
