"""One trainer at a time on a worker, and a worker that forgets a trainer that is gone.

TensorFlow keeps what a connected process made on a worker (its variables, optimizer slots, functions) after that
process dies: measured on TF 2.21, a worker's allocator held a killed client's 320 MiB of variables for as long as
it ran, with the eager service's keep-alive at 5 s, and a trainer killed and rerun stacked a second copy beside the
first. So a trainer holds a lease on each worker: a string resource on the worker's CPU naming its host and pid
with a beat it renews every BEAT_S from a thread (`Holder`). The worker reads it (`Watcher`) and, once its holder
released it, or the holder's process on this host has ended, or (a holder on another host) its beat stopped for
STALE_S, re-executes itself (worker.py): the same pid, cgroup and guard, with nothing of the old trainer left. A
trainer that finds a lease (`Claim`, before it connects) refuses in one line while the holder lives, and otherwise
waits for the worker to come back.
"""

import json
import os
import socket
import sys
import tempfile
import threading
import time

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import processes

CONTAINER, NAME = 'lingpipe', 'trainer_lease'
BEAT_S = 2.0  # How often a trainer renews its leases and a worker reads its own.
STALE_S = 60.0  # A lease of another host's trainer not renewed for this long belongs to one that is gone.
RESTART_WAIT_S = 90.0  # How long a trainer waits for a worker to come back from releasing a gone trainer.
RELEASED = 'released'


def _Handle(device):
  with tf.device(device):
    return tf.raw_ops.VarHandleOp(dtype=tf.string, shape=[], container=CONTAINER, shared_name=NAME)


def _Cpu(task_name):
  return '%s/device:CPU:0' % task_name


def _Lease(text):
  """The lease as a dict ({} when none was ever written)."""
  try:
    lease = json.loads(text) if text else {}
  except ValueError:
    return {}
  return lease if isinstance(lease, dict) else {}


def _Mine():
  return {'host': socket.gethostname(), 'pid': os.getpid()}


def HolderGone(lease):
  """Why the lease's trainer is known to be gone without waiting for its beat (released, or its process on this
  host ended), or None."""
  if lease.get(RELEASED):
    return 'it released the worker'
  pid = lease.get('pid')
  here = lease.get('host') == socket.gethostname()
  if here and isinstance(pid, int) and not processes.Alive(pid, lease.get('start')):
    return 'its process (pid %d on this host) has ended' % pid
  return None


class Watcher:
  """In a worker: reads its own lease through `session` (to its own server) every BEAT_S; `Due()` says why the
  worker must restart (its trainer is gone), or None."""

  def __init__(self, session, task_name):
    self._session = session
    with session.graph.as_default():
      self._read = tf.raw_ops.ReadVariableOp(resource=_Handle(_Cpu(task_name)), dtype=tf.string)
    self._last, self._changed = None, time.time()
    self.held = False  # Whether a trainer that is not gone held the lease at the last Due().

  def Due(self):
    try:
      text = self._session.run(self._read).decode()
    except tf.errors.OpError:  # Never written: no trainer has come yet.
      self.held = False
      return None
    now = time.time()
    if text != self._last:
      self._last, self._changed = text, now
    lease = _Lease(text)
    self.held = bool(lease)
    if not lease:
      return None
    holder = 'lingpipe-train pid %s on %s' % (lease.get('pid'), lease.get('host'))
    gone = HolderGone(lease)
    self.held = not gone
    if gone:
      return '%s: %s' % (holder, gone)
    if lease.get('host') == socket.gethostname():
      return None  # Its process lives (stopped, or busy): the pid is the word here, not the beat.
    if now - self._changed > STALE_S:
      return '%s: its lease was not renewed for %d s' % (holder, now - self._changed)
    return None


def _ReadThroughSession(address, task_name, timeout_s):
  """The worker's lease text ('' when never written) read by a graph session, before this process connects to the
  cluster (a worker that must restart would leave a connected process's context behind). None when it does not
  answer within timeout_s."""
  with tf.Graph().as_default() as graph:
    read = tf.raw_ops.ReadVariableOp(resource=_Handle(_Cpu(task_name)), dtype=tf.string)
  config = tf.compat.v1.ConfigProto(device_filters=[task_name], operation_timeout_in_ms=int(timeout_s * 1000))
  try:
    with tf.compat.v1.Session('grpc://' + address, graph=graph, config=config) as session:
      return session.run(read).decode()
  except tf.errors.FailedPreconditionError:
    return ''  # Never written.
  except tf.errors.NotFoundError:
    return ''
  except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.CancelledError):
    return None


def Claim(tasks, tcp_problem, worker_command, out=sys.stderr):
  """Before this process connects: for each (task name, address), refuses a worker whose lease a live trainer
  holds (a ClusterError naming it), and waits for a worker still holding a gone trainer's state to come back empty.
  `tcp_problem(address)` is None when a TCP connection opens; `worker_command(task name)` restarts one."""
  for task_name, address in tasks:
    deadline, said, first_text = time.time() + RESTART_WAIT_S, None, None
    while True:
      text = _ReadThroughSession(address, task_name, 10.0) if tcp_problem(address) is None else None
      lease = _Lease(text) if text is not None else None
      if lease is not None and (not lease or _IsMine(lease)):
        break  # Free (a fresh worker), or this process's own.
      holder = 'lingpipe-train pid %s on %s' % (lease.get('pid'), lease.get('host')) if lease else None
      gone = HolderGone(lease) if lease else None
      if lease and not gone:
        if lease.get('host') == socket.gethostname() or (first_text is not None and text != first_text):
          raise errors.ClusterError(
              'Worker %s at %s is in use by %s, %s; a worker serves one trainer at a time. Wait for that run to '
              'end (or stop it), or start other workers: %s. (--mode=eval, decode and inspect also run without '
              "--cluster_spec, on this machine's own devices.)" % (
                  task_name, address, holder, processes.Condition(lease.get('pid'), lease.get('host')),
                  worker_command(task_name)))
        first_text = first_text or text
        note = ('is leased to %s on another host; waiting up to %d s to see whether it is still running' % (
            holder, STALE_S))
      elif lease:
        note = 'still holds the state of %s, which %s; waiting for the worker to release it and restart' % (
            holder, gone[3:] if gone.startswith('it ') else gone)
      else:
        note = 'is restarting (it released the trainer before this one); waiting for it'
      if said != note:
        print('lingpipe: worker %s at %s %s (up to %d s).' % (task_name, address, note, RESTART_WAIT_S), file=out,
              flush=True)
        said = note
      if time.time() > deadline:
        raise errors.ClusterError(
            'Worker %s at %s did not come back within %d s after releasing the trainer before this one; see its '
            'log, or restart it: %s' % (task_name, address, RESTART_WAIT_S, worker_command(task_name)))
      time.sleep(0.5)


def _MarkerPath(port):
  return os.path.join(tempfile.gettempdir(), 'lingpipe-worker-%s.restarting' % port)


def MarkRestarting(address):
  """In a worker about to re-execute itself: a file on this host saying so (its pid inside), until `Ready`."""
  path = _MarkerPath(address.rsplit(':', 1)[-1])
  try:
    with open(path + '.tmp', 'w') as f:
      f.write(str(os.getpid()))
    os.replace(path + '.tmp', path)
  except OSError:
    pass


def Ready(address, pid=None):
  """In a worker serving again (or its launcher, once it stopped worker `pid`): removes the marker MarkRestarting
  wrote, only where it names that process (default: this one)."""
  path = _MarkerPath(address.rsplit(':', 1)[-1])
  try:
    with open(path) as f:
      if f.read().strip() != str(pid or os.getpid()):
        return
    os.remove(path)
  except OSError:
    pass


def RestartingHere(address):
  """Whether the worker at `address` is a process on this host that is re-executing itself (MarkRestarting)."""
  try:
    with open(_MarkerPath(address.rsplit(':', 1)[-1])) as f:
      pid = int(f.read().strip())
  except (OSError, ValueError):
    return False
  return processes.Alive(pid)


def _IsMine(lease):
  return lease.get('host') == socket.gethostname() and lease.get('pid') == os.getpid() and not lease.get(RELEASED)


class Holder:
  """In a trainer: writes this process's lease on each worker now, then renews it every BEAT_S on a daemon thread
  for as long as the process lives; `Release()` (at a clean exit) lets the workers restart at once."""

  _INSTANCES = []

  def __init__(self, task_names):
    self._devices = [_Cpu(t) for t in task_names]
    self._beat = 0
    self._lock = threading.Lock()
    self._start = processes.StartTime()
    self._Write()
    self._stop = threading.Event()
    threading.Thread(target=self._Run, daemon=True).start()
    Holder._INSTANCES.append(self)

  def _Write(self, released=False):
    with self._lock:
      self._beat += 1
      lease = dict(_Mine(), beat=self._beat, start=self._start)
      if released:
        lease[RELEASED] = True
      text = json.dumps(lease)
      for device in list(self._devices):
        try:
          with tf.device(device):
            tf.raw_ops.AssignVariableOp(resource=_Handle(device), value=tf.constant(text))
        except (tf.errors.OpError, ValueError):
          self._devices.remove(device)  # A worker that died or restarted is the watchdog's to name.

  def _Run(self):
    while not self._stop.wait(BEAT_S):
      self._CheckStillMine()
      self._Write()

  def _CheckStillMine(self):
    """Stops this process when another trainer wrote its lease on one of our workers (two trainers that claimed
    the same free workers at the same moment): the first to see it exits, leaving the workers to the other."""
    for device in list(self._devices):
      try:
        with tf.device(device):
          text = tf.raw_ops.ReadVariableOp(resource=_Handle(device), dtype=tf.string).numpy().decode()
      except (tf.errors.OpError, ValueError):
        continue
      lease = _Lease(text)
      if lease and not _IsMine(lease):
        print('lingpipe-train: error: worker %s was claimed by lingpipe-train pid %s on %s at the same moment as by '
              'this one; a worker serves one trainer at a time, so this one stops and leaves it the workers. Start '
              'other workers for this run.' % (device.rsplit('/device:', 1)[0], lease.get('pid'), lease.get('host')),
              file=sys.stderr, flush=True)
        os._exit(1)  # pylint: disable=protected-access

  def Release(self):
    self._stop.set()
    self._Write(released=True)


def ReleaseAll(timeout_s=5.0):
  """At a trainer's exit: its workers may restart now rather than after noticing it is gone. A worker that does not
  answer within timeout_s does not hold the exit up (it restarts once the lease goes stale)."""
  holders = list(Holder._INSTANCES)  # pylint: disable=protected-access
  del Holder._INSTANCES[:]  # pylint: disable=protected-access
  if not holders:
    return
  thread = threading.Thread(target=lambda: [holder.Release() for holder in holders], daemon=True)
  thread.start()
  thread.join(timeout_s)
