r"""Bytes each replica's worker process sends and receives per training step, and the step time, with the
replicas' gradients all-reduced into mirrored weights (cluster.gradient_exchange='all_reduce') against summed on
replica 0's device ('sum_on_replica_0'): R lingpipe-workers with one device each (R replicas of a one-cell
pipeline), and a client that trains a dense stack on them, as the trainer does (BaseTask.TrainStep).

    python benchmarks/gradient_exchange_benchmark.py --replicas=2,4 --write_docs

The bytes are the TCP payload of each worker's sockets (`ss -tinp`: bytes_sent and bytes_received), over the
timed steps, per step, as a multiple of the model's gradient bytes G (float32). They include the batch shard each
worker receives and a few scalars; the model is wide and the batch small, so that they are small beside G. All
workers share this machine's cores (unpinned, except R=2, where each worker has its own core): the step times
compare the two exchanges side by side, not with a real network.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time


from lingpipe import process_setup  # pylint: disable=g-import-not-at-top,wrong-import-position

process_setup.SetUpProcess()  # Before TensorFlow loads, as the binaries do.

EXCHANGES = ('all_reduce', 'sum_on_replica_0')


def _Args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--replicas', default='2,4', help='Values of R (worker processes, one replica each).')
  parser.add_argument('--width', type=int, default=512, help='Width of the dense layers.')
  parser.add_argument('--layers', type=int, default=8, help='Dense layers.')
  parser.add_argument('--batch', type=int, default=64, help='Global batch (split over the replicas).')
  parser.add_argument('--steps', type=int, default=10, help='Timed steps per configuration.')
  parser.add_argument('--bucket_mib', type=float, default=None, help='Gradients per collective, at most (default: '
                      'mirrors.BUCKET_BYTES).')
  parser.add_argument('--write_docs', action='store_true', help='Also write the printed table into '
                      'docs/benchmarks.md, with this command, the commit, the CPU and the date (benchmark_page.py).')
  parser.add_argument('--role', default='main', choices=('main', 'client'), help=argparse.SUPPRESS)
  parser.add_argument('--cluster_spec', default='', help=argparse.SUPPRESS)
  parser.add_argument('--exchange', default='all_reduce', help=argparse.SUPPRESS)
  parser.add_argument('--worker_pids', default='', help=argparse.SUPPRESS)
  return parser.parse_args(argv)


def SocketBytes(pids):
  """{pid: [bytes sent, bytes received]} over the established TCP sockets of each process in `pids`."""
  text = subprocess.run(['ss', '-tinpH', 'state', 'established'], capture_output=True, text=True,
                        check=True).stdout
  totals = {pid: [0, 0] for pid in pids}
  owner = None
  for line in text.splitlines():
    if not line[:1].isspace():  # A socket's line names its process; the indented line after it, its counters.
      found = re.search(r'pid=(\d+),', line)
      owner = int(found.group(1)) if found else None
      continue
    if owner in totals:
      for i, field in enumerate(('bytes_sent', 'bytes_received')):
        value = re.search(r'\b%s:(\d+)' % field, line)
        totals[owner][i] += int(value.group(1)) if value else 0
  return totals


def _Client(args):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.model import model_registry  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import mirrors  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
  if args.bucket_mib:
    mirrors.BUCKET_BYTES = int(args.bucket_mib * 2**20)
  spec = remote.ParseClusterSpec(args.cluster_spec)
  num_replicas = len(spec['worker'])
  p = model_registry.GetParams('synthetic.DeepMlpGPipe', 'Train')
  dims = [p.task.input_dim] + [args.width] * args.layers
  p.task.network.Set(num_splits=1, num_micro_batches=1, remat='never', input_shapes=None)
  p.task.network.layers = [p.task.network.layers[0].Copy().Set(name='sub_%d' % i, input_dim=dims[i],
                                                                output_dim=dims[i + 1]) for i in range(args.layers)]
  p.task.softmax.input_dim = args.width
  p.input.batch_size = args.batch
  p.cluster.Set(num_replicas=num_replicas, devices_per_task=1, gradient_exchange=args.exchange)
  mesh = remote.Connect(spec, p.cluster, 1)
  with cluster.Use(mesh), mesh.Placement():
    task = p.task.Instantiate()
    opt = task.CreateOptimizer()
  mirrored = (mirrors.Mirrors(task.trainable_variables, opt, mesh) if args.exchange == 'all_reduce' else None)
  schedule = task.CreateLearningRateSchedule()
  step = tf.Variable(0, dtype=tf.int64)
  batch = next(iter(p.input.Instantiate().GetDataset()))

  @tf.function(autograph=False)
  def Step(b):
    with cluster.Use(mesh), mesh.Placement(), mirrors.Use(mirrored):
      out = task.TrainStep(b, step, opt, schedule)
    step.assign_add(1)
    return out.loss

  for _ in range(2):  # Tracing and the first, slower steps.
    float(Step(batch))
  pids = [int(pid) for pid in args.worker_pids.split(',')]
  before, start = SocketBytes(pids), time.time()
  times = []
  for _ in range(args.steps):
    t = time.time()
    float(Step(batch))
    times.append(time.time() - t)
  after = SocketBytes(pids)
  gradient_bytes = sum(int(v.shape.num_elements()) * v.dtype.size for v in task.trainable_variables)
  per_step = [[(a - b) / args.steps for a, b in zip(after[pid], before[pid])] for pid in pids]
  result = {'gradient_bytes': gradient_bytes, 'per_step': per_step, 'step_s': statistics.median(times),
            'wall_s': time.time() - start,
            'equal': mirrored.MaxDifference() == 0.0 if mirrored else None}
  print(json.dumps(result), flush=True)


def _RunClient(spec_text, exchange, pids, args):
  command = [sys.executable, os.path.abspath(__file__), '--role=client', '--cluster_spec=' + spec_text,
             '--exchange=' + exchange, '--worker_pids=' + ','.join(map(str, pids)), '--width=%d' % args.width,
             '--layers=%d' % args.layers, '--batch=%d' % args.batch, '--steps=%d' % args.steps] + (
                 ['--bucket_mib=%g' % args.bucket_mib] if args.bucket_mib else [])
  out = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  if out.returncode:
    raise SystemExit('The client failed (%s): %s' % (exchange, out.stderr[-2000:]))
  return json.loads(out.stdout.strip().splitlines()[-1])


def Run(args):
  from lingpipe.distributed import local_cluster  # pylint: disable=g-import-not-at-top
  cores = sorted(os.sched_getaffinity(0))
  print('## Gradient exchange: bytes per step of each replica\'s worker, in units of the gradients G\n')
  print('Dense stack %d x %d (synthetic.DeepMlpGPipe\'s data), global batch %d, K=1, Adam, %d timed steps; TCP '
        'payload of each worker\'s sockets (ss).\n' % (args.layers, args.width, args.batch, args.steps))
  print('| R | exchange | G | sent per worker (xG) | received per worker (xG) | largest worker, in+out (xG) | '
        '2(R-1)/R | step s | copies equal |')
  print('|---|---|---|---|---|---|---|---|---|')
  results = []
  for num_replicas in map(int, args.replicas.split(',')):
    pins = [{cores[i]} for i in range(num_replicas)] if num_replicas <= len(cores) else None
    with local_cluster.LocalCluster(num_replicas, pin_cores=pins, threads=1) as workers:
      pids = [p.pid for p in workers.processes]
      for exchange in EXCHANGES:
        r = _RunClient(workers.spec_text, exchange, pids, args)
        g = r['gradient_bytes']
        sent = [s / g for s, _ in r['per_step']]
        received = [v / g for _, v in r['per_step']]
        largest = max(s + v for s, v in zip(sent, received))
        print('| %d | %s | %.2f MB | %s | %s | %.2f | %.2f | %.3f | %s |' % (
            num_replicas, exchange, g / 1e6, ' '.join('%.2f' % s for s in sent),
            ' '.join('%.2f' % v for v in received), largest, 2 * (num_replicas - 1) / num_replicas, r['step_s'],
            {True: 'yes', False: 'NO', None: '-'}[r['equal']]), flush=True)
        results.append(dict(r, replicas=num_replicas, exchange=exchange))
  print('\nall_reduce: each worker sends and receives about 2(R-1)/R x G (a ring: R-1 steps of reduce-scatter and '
        'R-1 of all-gather, G/R each), whatever its replica. sum_on_replica_0: replica 0\'s worker receives (R-1) x G '
        'of gradients and sends (R-1) x G of weights; at R=64 that is 63 G each way on one device, against 1.97 G on '
        'every device with all_reduce.')
  return results


def main():
  args = _Args()
  if args.role == 'client':
    _Client(args)
    return
  import benchmark_page  # pylint: disable=g-import-not-at-top
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  print('CPU: %s' % cpu_kernels.DescribeCpu(), flush=True)
  with benchmark_page.Recording() as recording:
    Run(args)
  if args.write_docs:
    benchmark_page.Write('Gradient exchange: all-reduce against a sum on replica 0', recording.Text(),
                         cpu_kernels.DescribeCpu())


if __name__ == '__main__':
  main()
