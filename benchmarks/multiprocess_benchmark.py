r"""K=2 pipeline over two worker processes, each pinned to its own core with one thread, against one pinned
process running the whole model: measured speed-up beside the ideal K*M/(M+K-1) for M in {1, 2, 4, 8, 16}.

    python benchmarks/multiprocess_benchmark.py --out=/tmp/multiprocess.json
    python benchmarks/pipeline_benchmark.py --sections=multiprocess      # the same, as a section of the benchmark

The model is Table 1's Transformer T(8, 512, 4), model depth 128, at batch 64 and 256 sequences of 32 tokens
(--batch), remat never (--remat); --workload=dense|conv and the size flags choose another (benchmarks/workloads.py).
Roles, each its own process: `plain` (the whole model, pinned to core 0, intra_op = inter_op = 1), also run twice at
once on the two cores (the machine's own two-core ceiling); two lingpipe-workers (core 0 and core 1, one thread
each); `client`, a trainer-like process that connects to them with lingpipe's remote.Connect and times a training
step (forward, backward, gradients left on the workers) of a PipeliningLayer with K=2 and with K=1 (on one worker)
for each M. The last columns compare K=2 with K=1 at the same M, i.e. with the cost of small micro-batches on a CPU
taken out; the last table factors the speed-up over the plain model into the one-cell pipeline's cost, the
micro-batch efficiency and the schedule's gain (workloads.Decomposition), the next one that gain into the work the
pipeline adds, the balance of the cells and the busiest worker's share of the step, from the workers' CPU times
(workloads.ScheduleByWorker; the added work is split between the threads that run ops and the others, gRPC's and
the RPC handlers'), and the last lines what one hand-off of a micro-batch's activations between the workers costs
their cores in CPU time (benchmarks/handoff_cost.py, measured by the first round's client), beside the compute of a
micro-batch on one cell. Everything is timed in one run, side by side, so the ratios are comparable on
a noisy machine; --rounds=N repeats the plain process and the client in turn N times against the same workers, so a
slow minute of the machine weighs on both: each step time is then the median over the rounds, and the speed-up table
also gives the lowest and highest round's. The run ends with a warning where its own figures show the machine was
busy (NoiseWarnings).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


import handoff_cost  # pylint: disable=g-import-not-at-top,wrong-import-position
import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position

from lingpipe import process_setup  # pylint: disable=g-import-not-at-top,wrong-import-position

process_setup.SetUpProcess()  # Before TensorFlow loads, as the binaries do.

HANDOFF = 'handoff'  # The client's key for _HandOffs's result (not a step time).

MICRO_BATCHES = (1, 2, 4, 8, 16)


def _Args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', default='multiprocess_benchmark.json', help='Where to write the JSON results.')
  parser.add_argument('--write_docs', action='store_true', help='Also write the printed tables into '
                      'docs/benchmarks.md, with this command, the commit, the CPU and the date (benchmark_page.py); '
                      "with --headline, the schedules' speed-ups into README.md's Results too.")
  parser.add_argument('--headline', action='store_true', help=argparse.SUPPRESS)
  parser.add_argument('--steps', type=int, default=7, help='Timed steps per configuration (median is kept).')
  parser.add_argument('--rounds', type=int, default=1, help='Times the plain process and the client run, in turn '
                      '(medians over rounds; the spread of the speed-up is printed).')
  parser.add_argument('--micro_batches', default=','.join(map(str, MICRO_BATCHES)), help='Values of M.')
  workloads.AddFlags(parser, default='transformer', batch_list=True)
  parser.add_argument('--remat', default='never', help='The pipeline\'s re-materialization policy.')
  parser.add_argument('--schedule', default='gpipe', help='The pipeline\'s schedule: gpipe, 1f1b, or '
                      'interleaved_1f1b:v (v cells per device); several, comma-separated, are timed side by side '
                      '(alternating at each M) and compared with the first.')
  parser.add_argument('--worker_threads', type=int, default=1, help='Intra- and inter-op threads per worker.')
  parser.add_argument('--unroll', action='store_true', help="Unroll the pipeline's passes (loop_phases=False): "
                      'across processes each loop iteration costs a round trip.')
  parser.add_argument('--role', default='main', choices=['main', 'plain', 'client'], help=argparse.SUPPRESS)
  parser.add_argument('--cluster_spec', default=None, help=argparse.SUPPRESS)
  parser.add_argument('--worker_pids', default='', help=argparse.SUPPRESS)
  parser.add_argument('--handoffs', action='store_true', help=argparse.SUPPRESS)  # The client measures them.
  return parser.parse_args(argv)


def _Model(args):
  """(layers, inputs) of the workload of `args` (a child's: --batch is one size, --dtype one dtype)."""
  workload = workloads.FromArgs(args, int(args.batch))
  return workload.layers, workload.inputs


def _TimeSteps(layer, inputs, steps, mesh=None, pids=()):
  """Median seconds of a training step (forward + backward; each variable's squared gradient is summed on its own
  device, so no gradient travels to this process). Like the trainer, the step runs under the mesh's placement, so
  what lies outside the pipeline's own placement (the loss, a K=1 layer's backward) runs on a worker. With the
  workers' `pids`, also each one's CPU seconds per timed step ('worker_cpu_s', from /proc), and those of its threads
  that run ops ('worker_op_cpu_s': TensorFlow's thread pools; the rest is gRPC's and the RPC handlers')."""
  import contextlib  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core import context  # pylint: disable=g-import-not-at-top

  @tf.function(autograph=False)
  def Step(inputs):
    with mesh.Placement() if mesh else contextlib.nullcontext():  # The backward too, as in BaseTask.TrainStep.
      with tf.GradientTape() as tape:
        with context.Training(True):
          if hasattr(layer, 'FPropWithLoss'):  # A pipeline: the loss inside it where the schedule needs that.
            loss, _ = layer.FPropWithLoss(inputs, inputs, lambda out, _: (_MeanSquare(out), {}))
          else:
            loss = _MeanSquare(layer.FProp(inputs))
      grads = tape.gradient(loss, layer.trainable_variables)
      norms = []
      for g, v in zip(grads, layer.trainable_variables):
        with tf.device(v.device):
          norms.append(tf.reduce_sum(tf.square(g)))
      return loss, tf.add_n(norms)

  start = time.perf_counter()
  Step(inputs)[1].numpy()
  first = time.perf_counter() - start
  Step(inputs)[1].numpy()
  times = []
  cpu = [handoff_cost.ProcessCpuSeconds(pid) for pid in pids]
  op_cpu = [handoff_cost.OpThreadCpuSeconds(pid) for pid in pids]
  for _ in range(steps):
    start = time.perf_counter()
    Step(inputs)[1].numpy()
    times.append(time.perf_counter() - start)
  result = dict(step_s=statistics.median(times), first_step_s=first)
  if pids:
    result['worker_cpu_s'] = [(handoff_cost.ProcessCpuSeconds(pid) - c) / steps for pid, c in zip(pids, cpu)]
    result['worker_op_cpu_s'] = [(handoff_cost.OpThreadCpuSeconds(pid) - c) / steps for pid, c in zip(pids, op_cpu)]
  return result


def _MeanSquare(out):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.reduce_mean(tf.square(tf.cast(out.x if isinstance(out, dict) else out, tf.float32)))


def Schedules(text):
  """[(label, schedule, virtual_stages)] of --schedule's text, e.g. 'gpipe,interleaved_1f1b:2'."""
  result = []
  for label in [t.strip() for t in text.split(',') if t.strip()]:
    name, _, v = label.partition(':')
    result.append((label, name, int(v or 1)))
  return result


def RowKey(k, m, label, first):
  """The client's result key: 'K=2,M=4' for the first schedule, 'K=2,M=4,<label>' for the others."""
  return 'K=%d,M=%d' % (k, m) + ('' if label == first else ',' + label)


def _Plain(args):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  from lingpipe.layers import sequential  # pylint: disable=g-import-not-at-top
  layers, inputs = _Model(args)
  layer = sequential.SequentialLayer.Params().Set(name='net', sub=layers).Instantiate()
  return {'plain': dict(_TimeSteps(layer, inputs, args.steps), kernels=cpu_kernels.Describe())}


def _Client(args):
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  mesh = remote.Connect(remote.ParseClusterSpec(args.cluster_spec), cluster.Params(), 2)
  layers, inputs = _Model(args)
  pids = [int(pid) for pid in args.worker_pids.split(',') if pid]
  results = {}
  micro = list(map(int, args.micro_batches.split(',')))
  schedules = Schedules(args.schedule)
  first = schedules[0]
  configs = [(1, 1, first)] + [(k, m, s) for m in micro for k, some in ((1, [first]), (2, schedules))
                               for s in some if (k, m) != (1, 1)]
  for k, m, (label, name, v) in configs:
    if k == 1:  # One cell: every schedule is the same sequence of micro-batches.
      name, v = 'gpipe', 1
    with cluster.Use(mesh):
      layer = pipelining_layer.PipeliningLayer.Params().Set(
          name='net', layers=[l.Copy() for l in layers], num_splits=k, num_micro_batches=m,
          remat=args.remat, schedule=name, virtual_stages=v, loop_phases=not args.unroll).Instantiate()
    key = RowKey(k, m, label, first[0])
    results[key] = _TimeSteps(layer, inputs, args.steps, mesh, pids)
    print('  %-24s %.3f s/step' % (key, results[key]['step_s']), file=sys.stderr, flush=True)
  if args.handoffs:  # What a hand-off at the cut costs the workers' cores (handoff_cost.py), per M.
    results[HANDOFF] = _HandOffs(args, mesh, layers, inputs, micro)
  if args.remat != 'never':  # The cost of re-materialization on one device, at each M (RematTarget).
    for m in micro:
      with cluster.Use(mesh):
        layer = pipelining_layer.PipeliningLayer.Params().Set(
            name='net', layers=[l.Copy() for l in layers], num_splits=1, num_micro_batches=m,
            remat='never', loop_phases=not args.unroll).Instantiate()
      key = 'K=1,M=%d,never' % m
      results[key] = _TimeSteps(layer, inputs, args.steps, mesh, pids)
      print('  %-24s %.3f s/step' % (key, results[key]['step_s']), file=sys.stderr, flush=True)
  return results


def _HandOffs(args, mesh, layers, inputs, micro_batches):
  """{M: handoff_cost row + 'bytes'}: one copy of a micro-batch's activations at the cut between the two cells."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import inspector  # pylint: disable=g-import-not-at-top
  shapes = tf.nest.map_structure(lambda t: t.shape.as_list(), inputs)
  with cluster.Use(mesh):  # The cut does not depend on M: cell 0's output for the whole batch, split M ways.
    cut = pipelining_layer.PipeliningLayer.Params().Set(
        name='cut', layers=[l.Copy() for l in layers], num_splits=2,
        input_shapes=dict(shapes) if isinstance(shapes, dict) else shapes).Instantiate()
  batch_bytes = inspector.CellSummaries(cut)[0].boundary_bytes
  sizes = {m: batch_bytes // m for m in micro_batches}
  devices = [mesh.Device(k, num_splits=2) for k in range(2)]
  pids = [int(pid) for pid in args.worker_pids.split(',')]
  measured = handoff_cost.Measure(devices, pids, sorted(set(sizes.values())))
  return {m: dict(measured[size], bytes=size) for m, size in sizes.items()}


def PrintHandOffs(handoffs, rows, micro_batches):
  """Prints, per M, a hand-off's CPU cost at the cut beside the compute a micro-batch costs one cell (K=1 at M's
  step time over 2M): each worker sends one hand-off and receives one per micro-batch (forward or backward)."""
  print('hand-offs at the cut (benchmarks/handoff_cost.py; a worker sends one and receives one per micro-batch):')
  for m in micro_batches:
    row = handoffs[m]
    compute_ms = rows['K=1,M=%d' % m]['step_s'] / (2 * m) * 1e3
    both = row['sender_ms'] + row['receiver_ms']
    row.update(compute_ms=compute_ms, share=both / compute_ms)
    print('  M=%-3d %s; sender + receiver %.2f ms = %.1f%% of a micro-batch\'s %.1f ms on one cell' % (
        m, handoff_cost.Describe(row['bytes'], row).strip(), both, 100 * row['share'], compute_ms), flush=True)


def NoiseWarnings(ceiling, per_round, spread=1.15):
  """What says the machine was busy with something else during a run: the two-core ceiling above 2 (two processes
  cannot do more than twice one's work, so the lone plain process ran in a slow moment), or rounds whose speed-ups
  (per_round: {M: [speed-up per round]}) differ by more than `spread` x."""
  warnings = []
  if ceiling > 2.05:
    warnings.append('the two-core ceiling read %.2fx, more than two processes can give: the lone plain process ran '
                    'in a slow moment, and the speed-ups against it are off; run again, or with --rounds=3' % ceiling)
  for m, rounds in sorted(per_round.items()):
    if len(rounds) > 1 and max(rounds) > spread * min(rounds):
      warnings.append('at M=%d the rounds\' speed-ups ran %.2f-%.2f: the machine was busy in some of them; the '
                      'medians are only as good as the quiet rounds' % (m, min(rounds), max(rounds)))
  return warnings


def RematTarget(plain_s, rows, remat, micro_batches, fraction=0.87):
  """Issue 15's target for a re-materializing pipeline: speed-up over the plain model >= `fraction` x ideal /
  the remat cost, the cost being K=1's step with `remat` over K=1's without at the same M on one worker (so the
  cost of small micro-batches is not counted twice). Prints the table; returns {M: row}."""
  from lingpipe.gpipe import schedule  # pylint: disable=g-import-not-at-top
  print('re-materialization (%s) against its target, %.2f x ideal / remat cost (K=1 with %s over K=1 without, same '
        'M):' % (remat, fraction, remat))
  print('%-6s %10s %10s %12s %10s %6s' % ('M', 'speed-up', 'ideal', 'remat cost', 'target', 'met'))
  out = {}
  for m in micro_batches:
    measured = plain_s / rows['K=2,M=%d' % m]['step_s']
    cost = rows['K=1,M=%d' % m]['step_s'] / rows['K=1,M=%d,never' % m]['step_s']
    target = fraction * schedule.IdealSpeedup(m, 2) / cost
    out[m] = dict(measured=measured, remat_cost=cost, target=target, met=measured >= target)
    print('%-6d %10.2f %10.2f %12.2f %10.2f %6s' % (m, measured, schedule.IdealSpeedup(m, 2), cost, target,
                                                     'yes' if measured >= target else 'no'), flush=True)
  return out


def _StartChild(role, extra, pin=None):
  command = [sys.executable, os.path.abspath(__file__), '--role=' + role] + extra
  preexec = (lambda: os.sched_setaffinity(0, pin)) if pin is not None else None
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.Popen(command, stdout=subprocess.PIPE, preexec_fn=preexec, env=env, text=True)


def _Result(child):
  out, _ = child.communicate()
  if child.returncode:
    raise SystemExit('A benchmark process failed with status %d.' % child.returncode)
  return json.loads(out.strip().splitlines()[-1])


def _RunChild(role, extra, pin=None):
  return _Result(_StartChild(role, extra, pin))


def MedianRows(rows):
  """{key: {'step_s', 'first_step_s'[, 'worker_cpu_s', 'worker_op_cpu_s']}} with each the median of those in `rows`
  (one such dict per round; the CPU times worker by worker)."""
  out = {}
  for key in rows[0]:
    out[key] = {field: statistics.median(r[key][field] for r in rows) for field in ('step_s', 'first_step_s')}
    for field in ('worker_cpu_s', 'worker_op_cpu_s'):
      if field in rows[0][key]:
        out[key][field] = [statistics.median(each) for each in zip(*(r[key][field] for r in rows))]
  return out


def Run(steps=7, micro_batches=MICRO_BATCHES, worker_threads=1, batch=64, remat='never',
        workload_flags=('--workload=transformer',), schedule_name='gpipe', rounds=1, unroll=False, dtype='float32'):
  """Runs the comparison in compute dtype `dtype`; prints the tables and returns the results."""
  from lingpipe.gpipe import schedule  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import local_cluster  # pylint: disable=g-import-not-at-top
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < 2:
    raise SystemExit('The multi-process benchmark needs 2 cores; this process may use %d.' % len(cores))
  flags = ['--steps=%d' % steps, '--micro_batches=' + ','.join(map(str, micro_batches)), '--batch=%d' % batch,
           '--remat=' + remat, '--schedule=' + schedule_name, '--dtype=' + dtype] + list(workload_flags) + (
               ['--unroll'] if unroll else [])
  name = workloads.FromArgs(_Args(flags), batch).name
  print('\n## %s, remat %s, schedule %s%s: K=2 over 2 worker processes (pinned to cores %d and %d, %d thread(s) '
        'each) vs one pinned process' % (name, remat, schedule_name, ', passes unrolled' if unroll else '', cores[0],
                                         cores[1], worker_threads), flush=True)
  plains = [_RunChild('plain', flags, pin={cores[0]})['plain']]
  # The machine's own ceiling: two independent plain processes, one per core, against one alone (shared caches,
  # memory bandwidth and clock boost make it less than 2 on small VMs).
  pair = [_StartChild('plain', flags, pin={core}) for core in cores[:2]]
  pair = [_Result(child)['plain']['step_s'] for child in pair]
  ceiling = 2 * plains[0]['step_s'] / max(pair)
  pins = [{cores[0]}, {cores[1]}]
  remotes = []
  with local_cluster.LocalCluster(2, pin_cores=pins, threads=worker_threads) as workers:
    for r in range(rounds):
      if r:
        plains.append(_RunChild('plain', flags, pin={cores[0]})['plain'])
      pids = ['--worker_pids=' + ','.join(str(p.pid) for p in workers.processes)] + ([] if r else ['--handoffs'])
      remotes.append(_RunChild('client', flags + ['--cluster_spec=' + workers.spec_text] + pids))
  handoffs = {int(m): row for m, row in remotes[0].pop(HANDOFF).items()}  # The first round's (JSON keys: text).
  plain = dict(MedianRows([{'plain': p} for p in plains])['plain'], kernels=plains[0]['kernels'])
  remote_rows = MedianRows(remotes)
  results = {'workload': name, 'batch': batch, 'remat': remat, 'schedule': schedule_name, 'unroll': unroll,
             'dtype': dtype,
             'plain': plain,
             'remote': remote_rows, 'kernels': plain['kernels'], 'rounds': [
                 {'plain': p, 'remote': r} for p, r in zip(plains, remotes)],
             'two_core_ceiling': ceiling, 'speedup': {}}
  if rounds > 1:
    print('%d rounds, plain process and client in turn: step times are medians over the rounds' % rounds)
  # The workers start from the same environment and import lingpipe first, as the plain process does.
  print('CPU kernels: %s (plain process; the workers run the same)' % plain['kernels'])
  print('two plain processes on two cores run %.2fx the throughput of one (the most a 2-way split can give here)'
        % ceiling)
  print('one pinned process, whole model: %.3f s/step; K=1 on one worker: %.3f s/step (%.2fx its throughput)' % (
      plain['step_s'], remote_rows['K=1,M=1']['step_s'], plain['step_s'] / remote_rows['K=1,M=1']['step_s']))
  # 'over K=1': K=2 against K=1 with the same M on one worker, i.e. with the cost of small micro-batches taken out
  # (on a CPU a Transformer on micro-batches of 8 rows is much slower per row than on the whole batch).
  print('%-6s %10s %10s %10s %16s %10s %12s %10s%s' % ('M', 'speed-up', 'ideal', 'ratio', 'machine ideal', 'ratio',
                                                        'over K=1', 'ratio', '   rounds' if rounds > 1 else ''))
  for m in micro_batches:
    measured = plain['step_s'] / remote_rows['K=2,M=%d' % m]['step_s']
    per_round = [p['step_s'] / r['K=2,M=%d' % m]['step_s'] for p, r in zip(plains, remotes)]
    ideal = schedule.IdealSpeedup(m, 2)
    machine = ideal * ceiling / 2
    same_m = remote_rows['K=1,M=%d' % m]['step_s'] / remote_rows['K=2,M=%d' % m]['step_s']
    results['speedup'][m] = dict(measured=measured, ideal=ideal, ratio=measured / ideal, machine_ideal=machine,
                                 machine_ratio=measured / machine, over_k1_same_m=same_m,
                                 over_k1_same_m_ratio=same_m / ideal, per_round=per_round)
    print('%-6d %10.2f %10.2f %10.2f %16.2f %10.2f %12.2f %10.2f%s' % (
        m, measured, ideal, measured / ideal, machine, measured / machine, same_m, same_m / ideal,
        '   %.2f-%.2f' % (min(per_round), max(per_round)) if rounds > 1 else ''), flush=True)
  schedules = Schedules(schedule_name)
  if len(schedules) > 1:
    first = schedules[0][0]
    print('schedules side by side (speed-up over the plain process; in brackets, throughput over %s, and the '
          'schedule efficiency: over K=1 at the same M, divided by the ideal K*M/(M+K-1)):' % first)
    print('%-6s' % 'M' + ''.join('%26s' % label for label, _, _ in schedules))
    results['schedules'] = {}
    for m in micro_batches:
      base = remote_rows[RowKey(2, m, first, first)]['step_s']
      one = remote_rows['K=1,M=%d' % m]['step_s']
      cells = []
      for label, _, _ in schedules:
        step = remote_rows[RowKey(2, m, label, first)]['step_s']
        efficiency = one / step / schedule.IdealSpeedup(m, 2)
        results['schedules'].setdefault(label, {})[m] = dict(step_s=step, speedup=plain['step_s'] / step,
                                                             over_first=base / step, schedule_ratio=efficiency)
        cells.append('%26s' % ('%.2f (%.2fx, %.2f)' % (plain['step_s'] / step, base / step, efficiency)))
      print('%-6d' % m + ''.join(cells), flush=True)
  if remat != 'never':
    results['remat_target'] = RematTarget(plain['step_s'], remote_rows, remat, micro_batches)
  print('where the time goes (vs plain: the pinned plain process; the other step times on the workers):')
  step_times = {key: row['step_s'] for key, row in remote_rows.items()}
  results['decomposition'] = workloads.Decomposition(plain['step_s'], step_times, 2, micro_batches)
  print("%s's gain from the workers' CPU time (/proc; work: K=1's CPU time over the workers' together; balance: the "
        "mean worker's over the busiest's; busy: the busiest's share of the step, over K=1's; what K=2 spends "
        "beyond K=1, in K=1's CPU time: on the threads that run ops, and on the others: gRPC, RPC handlers):"
        % schedules[0][0])
  results['schedule_by_worker'] = workloads.ScheduleByWorker(
      step_times, {key: row['worker_cpu_s'] for key, row in remote_rows.items()}, 2, micro_batches,
      {key: row['worker_op_cpu_s'] for key, row in remote_rows.items()})
  PrintHandOffs(handoffs, remote_rows, micro_batches)
  results[HANDOFF] = handoffs
  results['warnings'] = NoiseWarnings(ceiling, {m: row['per_round'] for m, row in results['speedup'].items()})
  for warning in results['warnings']:
    print('WARNING: ' + warning, flush=True)
  return results


def CompareDtypes(by_dtype, micro_batches):
  """Prints, per compute dtype, the plain process's step and K=2's speed-up over it at each M (each against the
  plain model in the same dtype), and each dtype's throughput over float32's; returns them."""
  first = next(iter(by_dtype))
  print('\n## compute dtypes side by side (plain: one pinned process; K=2: speed-up over the plain process in the '
        'same dtype)')
  print('%-10s %10s %10s' % ('dtype', 'plain s', 'vs ' + first) + ''.join('%9s' % ('M=%d' % m) for m in micro_batches))
  out = {}
  for dtype, r in by_dtype.items():
    plain = r['plain']['step_s']
    out[dtype] = dict(plain_step_s=plain, plain_over_first=by_dtype[first]['plain']['step_s'] / plain,
                      speedup={m: r['speedup'][m]['measured'] for m in micro_batches})
    print('%-10s %10.3f %10.2f' % (dtype, plain, out[dtype]['plain_over_first']) + ''.join(
        '%9.2f' % out[dtype]['speedup'][m] for m in micro_batches), flush=True)
  return out


def main():
  args = _Args()
  if args.role == 'plain':
    print(json.dumps(_Plain(args)))
  elif args.role == 'client':
    print(json.dumps(_Client(args)))
  else:
    import benchmark_page  # pylint: disable=g-import-not-at-top
    with benchmark_page.Recording() as recording:
      results = _Main(args)
    if args.write_docs:
      benchmark_page.Write('Two pinned worker processes: %s' % results['title'], recording.Text(), results['cpu'],
                           headline=Headline(results) if args.headline else None)


def _Main(args):
  """Runs the benchmark the flags ask for (the main process's role); returns its results."""
  batches = workloads.Batches(args) if args.batch or args.workload != 'transformer' else [64, 256]
  micro = [int(m) for m in args.micro_batches.split(',')]
  dtypes = workloads.Dtypes(args)
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  print('CPU: %s' % cpu_kernels.DescribeCpu())
  results = {'cpu': cpu_kernels.DescribeCpu(), 'runs': []}
  for batch in batches:
    for dtype in dtypes:
      key = 'batch_%d' % batch + ('' if dtype == 'float32' else '_' + dtype)
      results[key] = Run(args.steps, micro, args.worker_threads, batch, args.remat, workloads.SizeFlags(args),
                         args.schedule, args.rounds, args.unroll, dtype)
      results['runs'].append(key)
    if len(dtypes) > 1:
      results['batch_%d_dtypes' % batch] = CompareDtypes(
          {d: results['batch_%d' % batch + ('' if d == 'float32' else '_' + d)] for d in dtypes}, micro)
  first = results[results['runs'][0]]
  results['title'] = '%s, remat %s' % (first['workload'], first['remat'])
  with open(args.out, 'w') as f:
    json.dump(results, f, indent=2, sort_keys=True)
  print('Wrote %s' % args.out)
  return results


def Headline(results):
  """README's results table: each schedule's speed-up over the plain model, K=2 on two pinned worker processes,
  per workload run and M."""
  lines = []
  for key in results['runs']:
    run = results[key]
    schedules = run.get('schedules') or {run['schedule']: {m: dict(speedup=row['measured'])
                                                            for m, row in run['speedup'].items()}}
    if not lines:
      lines = ['| K=2 on two pinned processes vs the plain model | M | ' + ' | '.join(
          '`%s`' % name for name in schedules) + ' |', '|---|---|' + '---|' * len(schedules)]
    for m in sorted(next(iter(schedules.values()))):
      lines.append('| %s, %s, remat %s | %d | %s |' % (run['workload'], run['dtype'], run['remat'], m, ' | '.join(
          '%.2fx' % schedules[name][m]['speedup'] for name in schedules)))
  return lines


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal.
  main()
