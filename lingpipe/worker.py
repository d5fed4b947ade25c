r"""lingpipe-worker: one task of a cluster, serving its devices to a lingpipe trainer over TensorFlow's runtime.

    lingpipe-worker --cluster_spec='{"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}' --job=worker --task=0
    lingpipe-worker --cluster_spec=worker=127.0.0.1:2222,127.0.0.1:2223 --task=1 --cpu_devices=2

It starts a `tf.distribute.Server` for (job, task) at that task's address, publishes its identity (the cluster spec,
job and task it was started with) so the trainer can refuse a worker of another cluster
(lingpipe/distributed/remote.py), prints one 'ready' line, and serves until SIGTERM or SIGINT, on which it exits
with status 0. Mistakes (a task not in the spec, a port in use) print one line and exit with status 1. It serves
one trainer at a time, which holds a lease on it; once that trainer is gone (ended, killed, or, on another host,
silent for 60 s), the worker re-executes itself, same pid, so that nothing the trainer made stays in its memory
(lingpipe/distributed/worker_lease.py), and says so in its log. Started by a launcher that dies (tools/launch_local.py,
kill -9 included), it gets SIGUSR1 and serves on while its trainer saves and goes, then stops.

Security: TensorFlow's gRPC server listens on every interface (0.0.0.0:PORT, whatever host the spec names; TF 2.21
has no option to bind one address) and authenticates nobody: anyone who reaches the port can run TensorFlow ops in
this process. Run workers only on a private network or behind a firewall that admits the cluster's hosts.
"""

import os
import signal
import sys
import threading
import time

from absl import app
from absl import flags

from lingpipe import binary
from lingpipe.memory import memory_budget

flags.DEFINE_string('cluster_spec', None, 'The cluster: JSON {"worker": ["host:port", ...]} or '
                    'worker=host:port,host:port; the same on every worker and the trainer. Default: TF_CONFIG\'s '
                    '(with --job and --task from its task).')
flags.DEFINE_string('job', 'worker', 'This process\'s job in the cluster spec.')
flags.DEFINE_integer('task', None, 'This process\'s task index in its job.')
flags.DEFINE_integer('cpu_devices', 1, 'CPU devices this worker offers (used when it has no GPU): each can hold '
                     'one pipeline split.')
flags.DEFINE_integer('intra_op_threads', 0, 'Threads per op (0: TensorFlow\'s default).')
flags.DEFINE_integer('inter_op_threads', 0, 'Ops run concurrently (0: TensorFlow\'s default).')
flags.declare_key_flag(memory_budget.FLAG.name)  # Defined once for both binaries (memory_budget.py).
flags.DEFINE_boolean('verbose', False, 'Show tracebacks of user errors and TensorFlow\'s own log lines.')

FLAGS = flags.FLAGS


def Serve(stop_event=None, out=sys.stdout):
  """Starts the server of FLAGS' task; blocks until stop_event is set (SIGTERM/SIGINT set it)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import tf_config  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import worker_lease  # pylint: disable=g-import-not-at-top
  job_given = FLAGS['job'].present or FLAGS.job != 'worker'  # 'worker' is the default; TF_CONFIG may say more.
  spec, job, task = tf_config.Resolve(FLAGS.cluster_spec, FLAGS.job if job_given else None, FLAGS.task)
  if spec is None or task is None:
    raise errors.ConfigError('--cluster_spec and --task are required, or TF_CONFIG (e.g. --cluster_spec=worker='
                             '127.0.0.1:2222,127.0.0.1:2223 --task=0).')
  job = job or 'worker'
  if job in tf_config.SERVERLESS_JOBS:
    raise errors.ConfigError('TF_CONFIG names this task %s:%s, which runs %s, not lingpipe-worker.' % (
        job, task, 'lingpipe-train (it trains as the chief)' if job == 'chief' else
        'lingpipe-train --mode=eval (%s)' % tf_config.EVALUATOR_ADVICE))
  FLAGS.job, FLAGS.task = job, task
  remote.CheckTask(spec, FLAGS.job, FLAGS.task)
  if FLAGS.cpu_devices < 1:
    raise errors.ConfigError('--cpu_devices must be >= 1, got %d.' % FLAGS.cpu_devices)
  address = spec[FLAGS.job][FLAGS.task]
  config = tf.compat.v1.ConfigProto(device_count={'CPU': FLAGS.cpu_devices},
                                    intra_op_parallelism_threads=FLAGS.intra_op_threads,
                                    inter_op_parallelism_threads=FLAGS.inter_op_threads)
  budget = _MemoryBudget(config, remote.TaskName(FLAGS.job, FLAGS.task))
  try:
    server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=FLAGS.job, task_index=FLAGS.task,
                                  config=config, start=True)
  except (tf.errors.OpError, RuntimeError, ValueError) as e:
    raise errors.ClusterError('Cannot start the server of %s at %s: %s. Is the port in use by another process?'
                              % (remote.TaskName(FLAGS.job, FLAGS.task), address,
                                 str(e).strip().splitlines()[0])) from e
  remote.PublishIdentity(server, spec, FLAGS.job, FLAGS.task, budget)
  stop_event = stop_event or threading.Event()
  print('lingpipe-worker %s ready at %s (cluster %s; memory budget: %s)' % (
      remote.TaskName(FLAGS.job, FLAGS.task), address, remote.SpecText(spec),
      budget.Describe() if budget else 'none'), file=out, flush=True)
  print('lingpipe-worker: note: TensorFlow listens on every interface (*:%s) without authentication; keep this '
        'port on a private network (see lingpipe-worker --help).' % address.rsplit(':', 1)[-1], file=sys.stderr,
        flush=True)
  worker_lease.Ready(address)
  gone = []  # Why the trainer is gone, once the lease's watcher says so (it then sets stop_event).
  config = tf.compat.v1.ConfigProto(device_filters=[remote.TaskName(FLAGS.job, FLAGS.task)],
                                    operation_timeout_in_ms=int(worker_lease.BEAT_S * 5000))
  session = tf.compat.v1.Session(server.target, config=config)
  lease = worker_lease.Watcher(session, remote.TaskName(FLAGS.job, FLAGS.task))

  def Watch():  # On its own thread: a signal stops the worker at once, whatever a read of the lease waits for.
    while not stop_event.wait(worker_lease.BEAT_S):
      try:
        why = lease.Due()
      except tf.errors.OpError:
        continue
      if why:
        gone.append(why)
        stop_event.set()
      elif _ORPHANED and (not lease.held or time.time() - _ORPHANED[0] > ORPHAN_GRACE_S):
        stop_event.set()  # The launcher is gone, and its trainer has saved and gone too (or took too long).

  threading.Thread(target=Watch, daemon=True).start()
  while not stop_event.wait(0.5):  # Wakes up to let Python run the signal handlers.
    pass
  if gone and not _SIGNALLED and not _ORPHANED:  # A signal stops the worker, even as its trainer goes.
    print('lingpipe-worker %s: its trainer is gone (%s); restarting to release what it held.' % (
        remote.TaskName(FLAGS.job, FLAGS.task), gone[0]), file=out, flush=True)
    _RESTART.append(address)
    return server
  print('lingpipe-worker %s stopping' % remote.TaskName(FLAGS.job, FLAGS.task), file=out, flush=True)
  return server


_RESTART = []  # The worker's address once Serve returned to restart (its trainer is gone).
_SIGNALLED = []  # [True] once SIGTERM or SIGINT came.
# The time the process that started this worker died (local_cluster.ORPHANED_SIGNAL): the worker serves on while a
# trainer holds its lease, for that trainer's last save on its own SIGTERM, then stops.
_ORPHANED = []
ORPHAN_GRACE_S = 120.0


def _ReExecute(address):
  """Replaces this process by a fresh lingpipe-worker with the same command line, pid, cgroup and guard: all that
  a gone trainer made here is released with the old process image (worker_lease.py)."""
  from lingpipe import native_log  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import worker_lease  # pylint: disable=g-import-not-at-top
  worker_lease.MarkRestarting(address)
  memory_budget.KeepAcrossExec()
  sys.stdout.flush()
  native_log.Close()  # fd 2 back on the log: its filter thread ends with this image.
  sys.stderr.flush()
  os.execv(sys.executable, [sys.executable, '-m', 'lingpipe.worker'] + sys.argv[1:])


def _MemoryBudget(config, name):
  """The worker's budget (--memory_limit, or its cgroup's): each GPU's memory_limit in `config` where it has GPUs,
  else the kernel's memory cgroup, with a guard that names a death by it (memory_budget.py)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core import byte_sizes  # pylint: disable=g-import-not-at-top
  from lingpipe.memory import memory_cgroup  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices('GPU')
  if gpus and FLAGS.memory_limit:
    limit = byte_sizes.Parse(FLAGS.memory_limit, '--memory_limit')
    for _ in gpus:
      config.gpu_options.experimental.virtual_devices.add(memory_limit_mb=[limit // 2**20])
    return memory_cgroup.Budget(limit, '--memory_limit', "TensorFlow's per-GPU memory_limit")
  if FLAGS.memory_limit:
    byte_sizes.ParseBudget(FLAGS.memory_limit, '--memory_limit')  # A bad or impossible value is one line.
  budget = memory_budget.Current()  # Applied before TensorFlow loaded (binary.py), where this process is a binary.
  memory_budget.Tell(name='lingpipe-worker %s' % name)
  return budget


def main(argv):
  status = binary.CheckNoArguments('lingpipe-worker', argv)
  if status is not None:
    return status
  binary.QuietUnlessVerbose(FLAGS.verbose)
  from lingpipe.core import memory_stats  # pylint: disable=g-import-not-at-top
  memory_stats.EnableAllocatorStats()  # Before the server starts TensorFlow (memory_stats.py).
  stop = threading.Event()
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda *unused: (_SIGNALLED.append(True), stop.set()))
  signal.signal(signal.SIGUSR1, lambda *unused: _ORPHANED.append(time.time()))  # local_cluster.ORPHANED_SIGNAL
  return binary.RunUserErrorsAsOneLine('lingpipe-worker', lambda: Serve(stop), FLAGS.verbose)


def Main():
  """Console-script entry point. Exits without tearing down the gRPC server, which TensorFlow cannot stop."""
  from lingpipe import native_log  # pylint: disable=g-import-not-at-top

  def Run(argv):
    code = main(argv)
    if code == 0 and _RESTART:
      _ReExecute(_RESTART[0])
    sys.stdout.flush()
    native_log.Close()  # os._exit skips atexit, where the filter would write what it kept.
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access

  binary.StartProcess(__doc__, __name__)
  app.run(Run)


if __name__ == '__main__':
  Main()
