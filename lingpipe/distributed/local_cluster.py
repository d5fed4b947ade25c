"""LocalCluster: lingpipe-worker processes on free loopback ports of this machine, started and torn down together.

Used by tools/launch_local.py (multi-process runs in one command), the multi-process tests and the benchmark:

    with local_cluster.LocalCluster(num_workers=2) as workers:
      subprocess.run(['lingpipe-train', '--cluster_spec=' + workers.spec_text, ...])
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from lingpipe.core import byte_sizes
from lingpipe.core import errors
from lingpipe.memory import memory_budget
from lingpipe.memory import memory_cgroup
from lingpipe.distributed import remote
from lingpipe.distributed import worker_lease


_MIN_WORKER_MEMORY = '512MiB'  # What a worker takes to start (TensorFlow and its server: about 300 MiB, measured).


def FreePorts(count, host='127.0.0.1'):
  """`count` distinct ports that were free on `host` a moment ago."""
  sockets, ports = [], []
  try:
    for _ in range(count):
      s = socket.socket()
      s.bind((host, 0))
      sockets.append(s)
      ports.append(s.getsockname()[1])
  finally:
    for s in sockets:
      s.close()
  return ports


def _Prctl():
  """libc's prctl, looked up now: a child between fork and exec should only call it."""
  if not sys.platform.startswith('linux'):
    return None
  try:
    return ctypes.CDLL(None, use_errno=True).prctl
  except (OSError, AttributeError):
    return None


_PRCTL = _Prctl()
_PR_SET_PDEATHSIG = 1


# The parent-death signal of a worker: it serves on until its trainer, stopped by its own SIGTERM, has saved and
# gone (worker.py), where SIGTERM would take the variables the trainer's last save needs.
ORPHANED_SIGNAL = signal.SIGUSR1


def ChildSetup(cores=None, death_signal=signal.SIGTERM, cgroup_procs=None):
  """A preexec_fn for child processes of this one: on Linux the child gets `death_signal` when this process dies,
  however it dies (SIGKILL included; a parent-death signal), so no worker or trainer outlives its launcher; `cores`
  pins it (like taskset); `cgroup_procs` (memory_cgroup.OutsideOwnBudget) moves it into that cgroup."""
  parent = os.getpid()

  def Setup():
    if cgroup_procs:
      fd = os.open(cgroup_procs, os.O_WRONLY)
      try:
        os.write(fd, str(os.getpid()).encode())
      finally:
        os.close(fd)
    if _PRCTL is not None:
      _PRCTL(_PR_SET_PDEATHSIG, death_signal, 0, 0, 0)
      if os.getppid() != parent:  # The parent died before the signal was armed.
        os.kill(os.getpid(), death_signal)
    if cores is not None:
      os.sched_setaffinity(0, cores)

  return Setup


def WorkerArgs(spec_text, job, task, cpu_devices=1, threads=0, memory_limit=None):
  """The command line of one lingpipe-worker (run with this Python, so no console script is needed); without
  `spec_text`, the worker reads its cluster and task from TF_CONFIG."""
  where = ['--cluster_spec=' + spec_text, '--job=' + job, '--task=%d' % task] if spec_text else []
  return [sys.executable, '-m', 'lingpipe.worker'] + where + [
      '--cpu_devices=%d' % cpu_devices, '--intra_op_threads=%d' % threads, '--inter_op_threads=%d' % threads] + (
          ['--memory_limit=%s' % memory_limit] if memory_limit else [])


class LocalCluster:
  """`num_workers` workers of job `job` on 127.0.0.1. pin_cores: a list of CPU core sets, one per worker (worker
  i runs on pin_cores[i], like `taskset`), or None. threads: intra- and inter-op threads per worker (0: TF's).
  memory_limit: each worker's --memory_limit (e.g. '1.5GiB'), or None. cgroup_procs: a cgroup the workers start in.

  Worker logs go to log_dir; without one, to a temporary directory that Stop() removes when every worker exited
  cleanly (status 0) and keeps, saying where on stderr, when one did not, so a crash's log survives."""

  def __init__(self, num_workers, job='worker', cpu_devices=1, pin_cores=None, threads=0, log_dir=None,
               ready_timeout_s=60.0, tf_config=False, memory_limit=None, cgroup_procs=None):
    if num_workers < 1:
      raise errors.ConfigError('num_workers must be >= 1, got %d.' % num_workers)
    if memory_limit:  # One line here, not one per worker log; on GPUs it is each GPU's.
      on_gpus = memory_budget.GpuMachine()
      limit = (byte_sizes.Parse if on_gpus else byte_sizes.ParseBudget)(memory_limit, '--worker_memory')
      total = byte_sizes.MachineMemory()
      if not on_gpus and total and num_workers * limit > total:
        print('LocalCluster: note: %d workers x %s is more than this machine\'s %s of memory: they cannot all use '
              'their budgets at once, and the planner plans as if they could.' % (
                  num_workers, byte_sizes.Format(limit), byte_sizes.Format(total)), file=sys.stderr, flush=True)
    self.memory_limit = memory_limit
    self.cgroup_procs = cgroup_procs  # Where the workers start (ChildSetup), e.g. outside this process's budget.
    self.num_workers, self.job, self.cpu_devices = num_workers, job, cpu_devices
    self.pin_cores, self.threads, self.ready_timeout_s = pin_cores, threads, ready_timeout_s
    self.owns_log_dir = not log_dir
    self.log_dir = log_dir or tempfile.mkdtemp(prefix='lingpipe-workers-')
    os.makedirs(self.log_dir, exist_ok=True)
    self.spec = {job: ['127.0.0.1:%d' % port for port in FreePorts(num_workers)]}
    self.spec_text = remote.SpecText(self.spec)
    self.tf_config = tf_config  # Workers get TF_CONFIG (TfConfig) instead of --cluster_spec and --task.
    self.processes = [None] * num_workers

  def TfConfig(self, task_type='chief', index=0):
    """The TF_CONFIG text of a task of this cluster: a worker, or the trainer as the chief (which serves nothing,
    so its address is a placeholder)."""
    cluster = dict(self.spec, chief=['127.0.0.1:0'])
    return json.dumps({'cluster': cluster, 'task': {'type': task_type, 'index': index}})

  def LogPath(self, task):
    return os.path.join(self.log_dir, 'worker-%d.log' % task)

  def Log(self, task):
    with open(self.LogPath(task), errors='replace') as f:
      return f.read()

  def StartWorker(self, task):
    """Starts (or restarts) worker `task` and waits for its ready line."""
    cores = self.pin_cores[task] if self.pin_cores else None
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get('TF_CPP_MIN_LOG_LEVEL', '2'))
    env.pop('TF_CONFIG', None)
    if self.tf_config:
      env['TF_CONFIG'] = self.TfConfig(self.job, task)
    with open(self.LogPath(task), 'w') as log:
      self.processes[task] = subprocess.Popen(
          WorkerArgs(None if self.tf_config else self.spec_text, self.job, task, self.cpu_devices, self.threads,
                     self.memory_limit),
          stdout=log, stderr=subprocess.STDOUT, preexec_fn=ChildSetup(cores, ORPHANED_SIGNAL, self.cgroup_procs),
          env=env)
    deadline = time.time() + self.ready_timeout_s
    while time.time() < deadline:
      if 'ready at' in self.Log(task):
        return self.processes[task]
      if self.processes[task].poll() is not None:
        raise errors.ClusterError(self._EarlyExit(task))
      time.sleep(0.1)
    self.StopWorker(task, signal.SIGKILL)
    raise errors.ClusterError('Worker %s did not start within %g s; its log (%s) ends with: %s' % (
        remote.TaskName(self.job, task), self.ready_timeout_s, self.LogPath(task), self.Log(task)[-500:]))

  def _EarlyExit(self, task, wait_s=3.0):
    """Why worker `task` ended before its ready line: its memory budget (its guard's verdict, waited for up to
    wait_s), else its exit status and the end of its log."""
    process = self.processes[task]
    deadline = time.time() + wait_s
    verdict = memory_cgroup.Verdict(process.pid)
    while self.memory_limit and verdict is None and time.time() < deadline:
      time.sleep(0.1)
      verdict = memory_cgroup.Verdict(process.pid)
    name = remote.TaskName(self.job, task)
    if verdict and verdict.get('oom_killed'):
      return ('Worker %s was killed by the kernel before it was ready: it ran out of its memory budget of %s '
              '(--worker_memory) while starting. A worker needs several hundred MiB for TensorFlow alone; give '
              '--worker_memory of at least %s.' % (name, byte_sizes.Format(verdict['limit']), _MIN_WORKER_MEMORY))
    log = self.Log(task).strip()
    return 'Worker %s exited with status %s before it was ready; its log (%s) %s' % (
        name, process.returncode, self.LogPath(task), 'ends with: ' + log[-500:] if log else 'is empty.')

  def StopWorker(self, task, sig=signal.SIGTERM, timeout_s=10.0):
    """Sends `sig` (and SIGCONT) to worker `task` and waits for it to exit (SIGKILL after timeout_s); returns its
    exit code."""
    process = self.processes[task]
    if process is None or process.poll() is not None:
      return None if process is None else process.returncode
    process.send_signal(sig)
    if sig != signal.SIGKILL:
      process.send_signal(signal.SIGCONT)  # A stopped worker (SIGSTOP, Ctrl-Z) acts on the signal only once it runs.
    try:
      return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
      process.kill()
      return process.wait()

  def Start(self):
    try:
      for task in range(self.num_workers):
        self.StartWorker(task)
    except BaseException:
      self.Stop()
      raise
    return self

  def Stop(self):
    """Stops every worker; returns their exit codes (None for one never started; -SIGTERM for one this stopped
    while it re-executed itself, before its handler was back)."""
    running = [p is not None and p.poll() is None for p in self.processes]
    codes = [self.StopWorker(task) for task in range(self.num_workers)]
    for task, process in enumerate(self.processes):
      if process is not None:  # A worker stopped while it re-executed itself leaves its marker.
        worker_lease.Ready(self.spec[self.job][task], process.pid)
    if self.owns_log_dir and os.path.isdir(self.log_dir):
      failed = [task for task, code in enumerate(codes)
                if code not in (0, None) and not (running[task] and code == -signal.SIGTERM)]
      if failed:
        print('LocalCluster: worker(s) %s exited with %s; their logs are kept in %s' % (
            ', '.join(map(str, failed)), ', '.join(str(codes[t]) for t in failed), self.log_dir), file=sys.stderr)
      else:
        shutil.rmtree(self.log_dir, ignore_errors=True)
    return codes

  def __enter__(self):
    return self.Start()

  def __exit__(self, *unused):
    self.Stop()
