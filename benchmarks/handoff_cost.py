r"""What a hand-off between two pinned worker processes costs each core: the CPU time the sender's and the
receiver's process spend on one copy of a tensor, measured against the same copies kept on one worker.

    python benchmarks/handoff_cost.py --mib=0.5,1,2,8

Across processes TensorFlow moves a tensor through gRPC: the sender serializes it, the receiver reads it off the
socket and copies it into a new buffer. Each worker of a CPU pipeline is pinned to the core its cells compute on,
so that time comes out of the cells' own: a micro-batch whose activations are large against its compute pays it
on every hand-off (`benchmarks/multiprocess_benchmark.py` prints it for its workload beside the compute per
micro-batch). Accelerators copy over their own links instead, and hosts over their network; this measures the
loopback path of one machine.

Each copy is a fresh tensor made on worker 0 (the source plus a constant, as a cell's output is new each time) of
which one element is read on worker 1, so the whole tensor travels and the receiver computes next to nothing;
the same function with both ops on worker 0 is the baseline. The worker processes' CPU times come from /proc.
"""

import argparse
import json
import os
import time


COPIES = 10  # per call of the measured function: a call's own fixed cost is spread over them


def _StatCpuSeconds(path):
  """User + system CPU seconds in a /proc stat file."""
  with open(path) as f:
    fields = f.read().rsplit(')', 1)[1].split()  # The command name may hold spaces; it ends at the last ')'.
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def ProcessCpuSeconds(pid):
  """User + system CPU seconds of process `pid` so far (Linux /proc)."""
  return _StatCpuSeconds('/proc/%d/stat' % pid)


def OpThreadCpuSeconds(pid):
  """User + system CPU seconds so far of the threads of process `pid` that run TensorFlow's ops: its thread pools,
  whose threads it names tf_<pool> (tf_Compute, the inter-op pool; intra-op pools). The rest of ProcessCpuSeconds
  is the other threads': gRPC's, the RPC handlers' (unnamed: they carry the process's name), Python's. A thread
  that exited is not counted here; the pools' threads live as long as the process."""
  total = 0.0
  for tid in os.listdir('/proc/%d/task' % pid):
    try:
      with open('/proc/%d/task/%s/comm' % (pid, tid)) as f:
        if not f.read().startswith('tf_'):
          continue
      total += _StatCpuSeconds('/proc/%d/task/%s/stat' % (pid, tid))
    except OSError:  # The thread exited meanwhile.
      continue
  return total


def Measure(devices, pids, sizes, steps=20):
  """{size in bytes: dict(sender_ms, receiver_ms, wall_ms)} for each of `sizes`: what one copy of a float32
  tensor of that size from devices[0] (process pids[0]) to devices[1] (process pids[1]) costs each process in CPU
  time, and the wall time, beyond the same work with both ops on devices[0]. Each figure is a total over steps x
  COPIES copies, divided by their number."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  results = {}
  for size in sizes:
    with tf.device(devices[0]):
      source = tf.Variable(tf.zeros([max(int(size) // 4, 1)], tf.float32), trainable=False)
    spent = {}
    for across in (False, True):

      @tf.function(autograph=False)
      def Copies(across=across):
        firsts = []
        for i in range(COPIES):
          with tf.device(devices[0]):
            fresh = source + float(i)
          with tf.device(devices[1] if across else devices[0]):
            firsts.append(fresh[0])
        return tf.add_n(firsts)

      Copies().numpy()  # Traced and run once before timing.
      before = [ProcessCpuSeconds(pid) for pid in pids]
      start = time.perf_counter()
      for _ in range(steps):
        Copies().numpy()
      wall = time.perf_counter() - start
      after = [ProcessCpuSeconds(pid) for pid in pids]
      spent[across] = [wall] + [b - a for a, b in zip(before, after)]
    per_copy = lambda i: (spent[True][i] - spent[False][i]) / (steps * COPIES) * 1e3
    results[int(size)] = dict(wall_ms=per_copy(0), sender_ms=per_copy(1), receiver_ms=per_copy(2))
  return results


def Describe(size, row):
  return '%7.2f MiB: sender %.2f ms, receiver %.2f ms of CPU, %.2f ms of wall time a copy' % (
      size / 2**20, row['sender_ms'], row['receiver_ms'], row['wall_ms'])


def _Sizes(parser, text):
  """Bytes of each size in `text` (MiB, comma-separated); a usage error names a size that is not a positive number."""
  sizes = []
  for item in [t.strip() for t in text.split(',') if t.strip()]:
    try:
      mib = float(item)
    except ValueError:
      mib = 0.0
    if not 0 < mib < float('inf'):
      parser.error('--mib=%s: %r is not a positive, finite number of MiB (e.g. --mib=0.5,1,2).' % (text, item))
    sizes.append(mib * 2**20)
  if not sizes:
    parser.error('--mib=%s names no size (e.g. --mib=0.5,1,2).' % text)
  return sizes


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--mib', default='0.5,1,2,8', help='Tensor sizes in MiB, comma-separated.')
  parser.add_argument('--steps', type=int, default=20, help='Calls of the measured function per size (each makes '
                      '%d copies).' % COPIES)
  parser.add_argument('--out', default=None, help='Also write the results here as JSON ({bytes: row}).')
  args = parser.parse_args()
  cores = sorted(os.sched_getaffinity(0))
  if len(cores) < 2:
    raise SystemExit('Measuring a hand-off needs 2 cores, one per worker; this process may use %d.' % len(cores))
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import local_cluster  # pylint: disable=g-import-not-at-top
  sizes = _Sizes(parser, args.mib)
  with local_cluster.LocalCluster(2, pin_cores=[{cores[0]}, {cores[1]}], threads=1) as workers:
    mesh = remote.Connect(remote.ParseClusterSpec(workers.spec_text), cluster.Params(), 2)
    devices = [mesh.Device(k, num_splits=2) for k in range(2)]
    print('a copy from a worker pinned to core %d to one pinned to core %d, beyond the same work on one worker:' % (
        cores[0], cores[1]))
    results = Measure(devices, [p.pid for p in workers.processes], sizes, args.steps)
  for size, row in results.items():
    print(Describe(size, row), flush=True)
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(results, f, indent=2)


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()
  main()
