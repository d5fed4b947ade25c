r"""Pipelines across processes and hosts on TensorFlow's own distributed runtime.

Each worker process runs a `tf.distribute.Server` (`lingpipe-worker`, lingpipe/worker.py); the trainer connects to
them with `tf.config.experimental_connect_to_cluster(ClusterSpec)` and places each cell under
`/job:worker/replica:0/task:t/device:{GPU,CPU}:d` (cluster.py maps replicas and splits onto those devices). There is
no transport of ours: tensors cross processes through TensorFlow's gRPC runtime.

TensorFlow itself checks little, and a mistake there hangs or silently misplaces work (measured on TF 2.21: a task
that is not running makes the first remote op wait forever; a worker started with another cluster spec, or with
two tasks' addresses swapped, is used without complaint). So `Connect` first:
  1. opens a TCP connection to every task (a bounded wait; refused or timed out -> ClusterError naming the task,
     its address and the command that starts it);
  2. reads each worker's identity -- the cluster spec, job and task it was started with, which lingpipe-worker
     publishes as a string resource on its own CPU device -- through a TensorFlow op on that worker, under a
     timeout, and refuses a worker whose identity disagrees with the trainer's spec.
While training, a `Watchdog` (watchdog.py) notices a step that makes no progress (a worker that hangs, is stopped
or whose host is unreachable), finds which tasks do not answer, and stops the trainer with their names within
`cluster.timeout_s`; a worker that dies fails the step at once (gRPC reports the closed connection) and `Diagnose`
names it the same way. Each worker saves and restores its own variables into the logdir, which every task must see
at the same path (logdir/shared_logdir.py); a rerun resumes from the last checkpoint.
"""

import json
import os
import socket
import sys
import threading
import time

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import processes
from lingpipe.distributed import cluster
from lingpipe.memory import memory_cgroup
from lingpipe.distributed import worker_lease
from lingpipe.memory import worker_memory

IDENTITY_CONTAINER, IDENTITY_NAME = 'lingpipe', 'worker_identity'
TCP_TIMEOUT_S = 5.0


def ParseClusterSpec(text):
  """{job: [host:port, ...]} from JSON ('{"worker": ["h:1", "h:2"]}') or 'worker=h:1,h:2' (jobs joined by ';')."""
  text = (text or '').strip()
  expected = ('expected JSON like \'{"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}\' or '
              '\'worker=127.0.0.1:2222,127.0.0.1:2223\'')
  try:
    if text.startswith('{'):
      spec = json.loads(text)
    else:
      spec = {}
      for part in filter(None, (p.strip() for p in text.split(';'))):
        job, _, addresses = part.partition('=')
        spec[job.strip()] = [a.strip() for a in addresses.split(',') if a.strip()]
  except ValueError as e:
    raise errors.ConfigError('Cannot parse the cluster spec %r: %s; %s.' % (text, e, expected)) from e
  if (not isinstance(spec, dict) or not spec or
      not all(isinstance(a, list) and a and all(isinstance(x, str) and ':' in x for x in a) for a in spec.values())):
    raise errors.ConfigError('Cannot use the cluster spec %r: every job needs a list of host:port addresses; %s.' %
                             (text, expected))
  return {job: list(addresses) for job, addresses in spec.items()}


def SpecText(spec):
  """The canonical JSON text of a cluster spec (what workers and the trainer compare)."""
  return json.dumps(spec, sort_keys=True, separators=(',', ':'))


def TaskName(job, task):
  return '/job:%s/replica:0/task:%d' % (job, task)


def CheckTask(spec, job, task):
  """Raises ConfigError unless `job` is in the spec and has task `task`."""
  if job not in spec:
    raise errors.ConfigError('Job %r is not in the cluster spec (jobs: %s).%s' % (
        job, ', '.join(sorted(spec)), errors.DidYouMean(job, sorted(spec))))
  if not 0 <= task < len(spec[job]):
    raise errors.ConfigError('Task %d does not exist: job %r has %d task(s) (0..%d) in the cluster spec.' % (
        task, job, len(spec[job]), len(spec[job]) - 1))


_IDENTITY_KEYS = ('cluster_spec', 'job', 'task')  # What must match the trainer's spec; pid and host say where.


def IdentityText(spec, job, task, budget=None):
  """What a worker publishes about itself: its place in the cluster, its process (named when it stops or dies) and
  its memory budget (a memory_cgroup.Budget, whose usage the trainer reads)."""
  return json.dumps({'cluster_spec': SpecText(spec), 'job': job, 'task': task, 'pid': os.getpid(),
                     'host': socket.gethostname(), 'memory': budget._asdict() if budget else None,
                     'fresh_anon': worker_memory.OwnAnonymousBytes()})


def _Place(identity):
  return {k: identity.get(k) for k in _IDENTITY_KEYS}


def _IdentityHandle(job, task):
  """The handle of the identity resource on the task's CPU (the same shared name for writer and readers)."""
  with tf.device('%s/device:CPU:0' % TaskName(job, task)):
    return tf.raw_ops.VarHandleOp(dtype=tf.string, shape=[], container=IDENTITY_CONTAINER, shared_name=IDENTITY_NAME)


def PublishIdentity(server, spec, job, task, budget=None):
  """In a worker: stores its identity as a string resource on its CPU, where the trainer's Connect reads it."""
  with tf.Graph().as_default():
    handle = _IdentityHandle(job, task)
    with tf.device(handle.device):
      assign = tf.raw_ops.AssignVariableOp(resource=handle, value=tf.constant(IdentityText(spec, job, task, budget)))
    # device_filters: the session must not wait for the other tasks, which may not have started yet.
    config = tf.compat.v1.ConfigProto(device_filters=[TaskName(job, task)])
    with tf.compat.v1.Session(server.target, config=config) as session:
      session.run(assign)


def _ReadIdentity(job, task):
  handle = _IdentityHandle(job, task)
  with tf.device(handle.device):
    return tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.string).numpy().decode()


def _WithTimeout(fn, timeout_s):
  """(finished, result, exception) of fn() run on a daemon thread for at most timeout_s (a hung remote call cannot
  be cancelled; the thread is left behind and the caller stops)."""
  box = {}

  def Run():
    try:
      box['result'] = fn()
    except Exception as e:  # pylint: disable=broad-except
      box['error'] = e

  thread = threading.Thread(target=Run, daemon=True)
  thread.start()
  thread.join(timeout_s)
  return not thread.is_alive(), box.get('result'), box.get('error')


def _TcpProblem(address, timeout_s=TCP_TIMEOUT_S):
  """None if a TCP connection to host:port opens within timeout_s, else what went wrong."""
  host, _, port = address.rpartition(':')
  try:
    with socket.create_connection((host.strip('[]'), int(port)), timeout=timeout_s):
      return None
  except socket.timeout:
    return 'no TCP connection within %g s' % timeout_s
  except (OSError, ValueError) as e:
    return getattr(e, 'strerror', None) or str(e)


def ErrorSummary(error):
  """A one-line summary of a TensorFlow error (its class and the most telling line of its message)."""
  lines = [l.strip() for l in str(error).splitlines() if l.strip()]
  telling = [l for l in lines if any(w in l for w in ('UNAVAILABLE', 'Socket closed', 'Connection', 'DEADLINE',
                                                       'ABORTED', 'CANCELLED'))]
  line = (telling or [l for l in lines if not l.endswith('error:')] or [''])[0]
  return ('%s: %s' % (type(error).__name__, line[:200])).rstrip(': ')


def _WithoutRelayed(problems):
  """`problems` less the workers whose only problem is reaching another worker that is itself named: TensorFlow
  runs a probe's op on a live worker through the whole cluster, so one dead worker fails the others' probes too."""
  addresses = [a for _, a, _ in problems]
  relayed = [(t, a, p) for t, a, p in problems if any(other != a and other in p for other in addresses)]
  return [problem for problem in problems if problem not in relayed] if len(relayed) < len(problems) else problems


def WorkerCommand(spec, job, task, memory=None):
  """The command that starts worker `task` (with the --memory_limit it had, given its identity's `memory`)."""
  limit = ' --memory_limit=%dMiB' % (memory['limit'] // 2**20) if memory and memory.get('source') == (
      '--memory_limit') else ''
  return "lingpipe-worker --cluster_spec='%s' --job=%s --task=%d%s" % (SpecText(spec), job, task, limit)


class RemoteCluster(cluster.Cluster):
  """A Cluster whose devices are on the workers of `job`; knows their addresses (and, from their identities, their
  processes) for error messages."""

  def __init__(self, devices, spec, job, own_task, timeout_s, identities=None):
    super().__init__(devices, remote_job=job)
    self.spec, self.job, self.own_task = spec, job, own_task
    self.timeout_s = timeout_s
    self.identities = identities or {}
    self.memory = None  # A worker_memory.Monitor while training: the workers' last memory reports.
    self.at_connect = {}  # Each worker's memory report as this process connected, before it made anything there.
    self.memory_advice = ''  # What fits, said when a worker ran out of memory (the planner's, set by training).

  def Tasks(self):
    """(task, address) of every worker task except the trainer's own."""
    return [(t, a) for t, a in enumerate(self.spec[self.job]) if t != self.own_task]

  def Diagnose(self, timeout_s=None):
    """[(task, address, problem)] for the workers that do not answer now: each is probed at once (TCP, then a
    TensorFlow op), so the answer comes within about `timeout_s` however many there are."""
    timeout_s = min(self.timeout_s, 30.0) if timeout_s is None else timeout_s
    results = {}

    def Probe(task, address):
      problem = _TcpProblem(address, min(timeout_s, TCP_TIMEOUT_S))
      if problem is None:
        finished, _, error = _WithTimeout(lambda: _ReadIdentity(self.job, task), timeout_s)
        if not finished:
          problem = 'no answer to a TensorFlow op within %g s' % timeout_s
        elif error is not None and 'context_id' in str(error):
          problem = ('it restarted, releasing this trainer (its process ended, or, on another host, its lease '
                     'went %d s without renewal: was this process stopped?)' % worker_lease.STALE_S)
        elif error is not None:
          problem = ErrorSummary(error)
      if problem:
        state = self._ProcessState(task)
        if state is None or 'ended' in state:  # A death: was it its memory budget?
          cause = worker_memory.DeathCause(self, task, self.memory.last.get(task) if self.memory else None)
          state = cause or state
        results[task] = (task, address, state or problem)

    threads = [threading.Thread(target=Probe, args=ta, daemon=True) for ta in self.Tasks()]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    return _WithoutRelayed([results[t] for t in sorted(results)])

  def WorkerBudgets(self):
    """'task 0: 1.50 GiB (--memory_limit; enforced by ...); ...' of the workers with a budget, or ''."""
    parts = []
    for task, _ in self.Tasks():
      memory = (self.identities.get(task) or {}).get('memory')
      if memory and memory.get('limit'):
        parts.append('task %d: %s' % (task, memory_cgroup.Budget(**memory).Describe()))
    return '; '.join(parts)

  def SmallestWorkerBudget(self):
    """The smallest memory budget (bytes) a worker reports, or None."""
    limits = [(identity.get('memory') or {}).get('limit') for identity in self.identities.values()]
    return min([limit for limit in limits if limit], default=None)

  def _ProcessState(self, task):
    """What the worker's process is doing, where it runs on this host and has stopped or ended; else None."""
    identity = self.identities.get(task) or {}
    pid = identity.get('pid')
    if not isinstance(pid, int) or identity.get('host') != socket.gethostname():
      return None
    state = processes.State(pid)
    if state is None:
      return 'its process (pid %d on this host) has ended' % pid
    if state in ('T', 't'):
      return ('unresponsive: its process (pid %d on this host) is stopped (SIGSTOP, Ctrl-Z or a debugger); '
              '`kill -CONT %d` lets it go on' % (pid, pid))
    if state in ('Z', 'X'):
      return 'its process (pid %d on this host) has ended' % pid
    return None

  def FailureMessage(self, problems, what, resume_hint):
    names = '; '.join('worker %s at %s: %s' % (TaskName(self.job, t), a, p) for t, a, p in problems)
    memory = any('out of memory' in p for _, _, p in problems)
    held = [worker_memory.HeldAtStart(self, t) for t, _, _ in problems] if memory else []
    held = [h for h in held if h]
    if held:  # Not the configuration's fault: the worker began this run with memory it had not freed.
      advice = ' %s; a fresh worker gives this configuration its whole budget.' % '; '.join(held)
    else:
      advice = ' ' + self.memory_advice if memory and self.memory_advice else ''
    return '%s: %s. Restart %s (%s), then rerun the same command%s.%s' % (
        what, names, 'it' if len(problems) == 1 else 'them',
        '; '.join(WorkerCommand(self.spec, self.job, t, (self.identities.get(t) or {}).get('memory'))
                  for t, _, _ in problems), resume_hint, advice)


def RequestInterOpThreads(minimum):
  """Makes this process's inter-op threads at least `minimum` (from TensorFlow's default, its cores), before it
  connects: the workers run the functions of a connected process with that process's setting, not their own, and
  left to TensorFlow's default a worker pinned to one core gets one thread. With one thread a worker runs work that
  arrives from another process (a received tensor's consumers, a peer's request for a tensor) only once the ops it
  is running have no successor ready, i.e. at the end of an action; a pipeline then either waits for each hand-off
  to be copied or sends its results only when the sender stops (docs/design.md). Returns the number set, or None
  where TensorFlow had already started with fewer (it then stays, with a warning)."""
  current = tf.config.threading.get_inter_op_parallelism_threads()
  wanted = max(minimum, current or cluster.UsableCores())
  if wanted == current:
    return current
  try:
    tf.config.threading.set_inter_op_parallelism_threads(wanted)
  except RuntimeError:  # TensorFlow has started in this process: its threading is fixed.
    if current >= minimum:
      return current
    threads = ('%d inter-op threads, and the workers will run its steps with as many' % current if current else
               "TensorFlow's default inter-op threads, and each worker will run its steps with its own default (one "
               'thread on a worker pinned to one core)')
    print('lingpipe: warning: TensorFlow started in this process before it connected, with %s; with fewer than %d, '
          "a pipeline's hand-offs wait for whole actions. Connect before running any TensorFlow op." % (
              threads, minimum), file=sys.stderr)
    return None
  return wanted


def Connect(spec, params, num_splits, own_task=None):
  """Connects this process to the workers of `params.job` (the model's cluster params); returns the mesh.

  own_task: this process's task index in that job when it is a worker itself (it then serves that task's
  devices), or None for a trainer outside the cluster spec.
  """
  job = params.job
  CheckTask(spec, job, 0)
  if own_task is not None:
    CheckTask(spec, job, own_task)
  for other_job, addresses in sorted(spec.items()):  # TensorFlow waits forever for any task that is not up.
    for task, address in enumerate(addresses):
      if other_job == job and task == own_task:
        continue
      problem = _TcpProblem(address)
      deadline = time.time() + worker_lease.RESTART_WAIT_S
      while problem and worker_lease.RestartingHere(address) and time.time() < deadline:
        time.sleep(0.5)  # It is releasing the trainer before this one (worker_lease.py).
        problem = _TcpProblem(address)
      if problem:
        raise errors.ClusterError('Worker %s at %s is unreachable (%s). Start it with: %s' % (
            TaskName(other_job, task), address, problem, WorkerCommand(spec, other_job, task)))
  RequestInterOpThreads(params.min_remote_inter_op_threads)
  leased = [(TaskName(job, t), a) for t, a in enumerate(spec[job]) if t != own_task]
  worker_lease.Claim(leased, _TcpProblem, lambda name: WorkerCommand(spec, job, int(name.rsplit(':', 1)[-1])))
  if own_task is None:
    tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec(spec))
  else:
    tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec(spec), job_name=job, task_index=own_task)
  expected, identities = SpecText(spec), {}
  for task, address in enumerate(spec[job]):
    if task == own_task:
      continue
    finished, identity, error = _WithTimeout(lambda t=task: _ReadIdentity(job, t), params.timeout_s)
    where = 'Worker %s at %s' % (TaskName(job, task), address)
    if not finished:
      raise errors.ClusterError('%s accepts connections but did not answer within %g s (cluster.timeout_s). Is it '
                                'a TensorFlow server of this cluster? Restart it with: %s' % (
                                    where, params.timeout_s, WorkerCommand(spec, job, task)))
    if error is not None:
      if isinstance(error, tf.errors.NotFoundError):
        raise errors.ClusterError('%s is a TensorFlow server but not a lingpipe-worker (it has no identity to '
                                  'check). Start it with: %s' % (where, WorkerCommand(spec, job, task))) from error
      raise errors.ClusterError('%s failed a check: %s' % (where, ErrorSummary(error))) from error
    theirs = json.loads(identity)
    identities[task] = theirs
    if _Place(theirs) != _Place(json.loads(IdentityText(spec, job, task))):
      raise errors.ClusterError(
          '%s was started for another cluster: it is /job:%s/task:%d of %s, but this trainer\'s --cluster_spec '
          'makes it /job:%s/task:%d of %s. Restart the workers with the trainer\'s cluster spec (%s) or fix the '
          'trainer\'s.' % (where, theirs['job'], theirs['task'], theirs['cluster_spec'], job, task, expected,
                           WorkerCommand(spec, job, task)))
  worker_lease.Holder([name for name, _ in leased])
  slots = cluster.RemoteSlots(job, params.device_type, params.devices_per_task)
  mesh = cluster.Cluster.FromParams(params, num_splits, slots, remote_job=job)
  remote = RemoteCluster(mesh.devices, spec, job, own_task, params.timeout_s, identities)
  for task, _ in remote.Tasks():
    try:
      remote.at_connect[task] = worker_memory.Read(remote, task)
    except (tf.errors.OpError, ValueError):
      continue
  return remote
