"""What the trainer knows of its workers' memory: each one's budget (published in its identity, remote.py), its usage
and peak (its cgroup's charge, read by a TensorFlow op on the worker from memory.stat, else its /proc/self/status),
and, when one dies, whether its budget killed it (its guard's verdict on this host, memory_guard.py; elsewhere its
last usage).
"""

import re
import socket
import threading
import time

import tensorflow as tf

from lingpipe.core import byte_sizes
from lingpipe.memory import memory_cgroup

NEAR_BUDGET = 0.9  # A death with the last usage above this share of the budget is named as most likely memory.


def _Budget(mesh, task):
  memory = (mesh.identities.get(task) or {}).get('memory')
  return memory_cgroup.Budget(**memory) if memory else None


def _StatFile(budget):
  """The memory.stat of a worker's cgroup, or None where it has none (then its /proc status is read)."""
  return '%s/memory.stat' % budget.cgroup if budget is not None and budget.cgroup and budget.enforcement else None


def _Bytes(text, field):
  """Bytes of `field` (VmRSS, VmHWM, RssAnon) in a /proc status's text."""
  m = re.search(r'^%s:\s+(\d+) kB' % field, text.decode(errors='replace'), re.M)
  return int(m.group(1)) * 1024 if m else None


def Read(mesh, task):
  """{'limit', 'current', 'peak', 'anon', 'time'} of worker `task` now (limit None without a budget; anon: its
  process's anonymous memory). In a cgroup, current is its charge (memory_cgroup.StatCharge: anonymous and mapped
  memory, not the page cache of checkpoints it wrote, which the kernel reclaims first) and peak the same (Monitor
  keeps the largest); else its VmRSS and VmHWM. Raises on failure."""
  budget = _Budget(mesh, task)
  stat_file = _StatFile(budget)
  with tf.device('/job:%s/replica:0/task:%d/device:CPU:0' % (mesh.job, task)):
    status = tf.io.read_file('/proc/self/status')
    stat = tf.io.read_file(stat_file) if stat_file else None
  status = status.numpy()
  charge = memory_cgroup.StatCharge(stat.numpy().decode(errors='replace'), budget.version) if stat_file else None
  current = charge if charge is not None else _Bytes(status, 'VmRSS')
  return {'limit': budget.limit if budget else None, 'current': current,
          'peak': current if charge is not None else _Bytes(status, 'VmHWM'), 'anon': _Bytes(status, 'RssAnon'),
          'time': time.time()}


def OwnAnonymousBytes():
  """This process's anonymous memory (RssAnon), or None where /proc does not say."""
  try:
    with open('/proc/self/status', 'rb') as f:
      return _Bytes(f.read(), 'RssAnon')
  except OSError:
    return None


HELD_MARGIN = 64 * 2**20  # Anonymous memory beyond a fresh worker's that counts as held from before.


def HeldAtStart(mesh, task):
  """'worker task T began this run holding X more than when it started (A, against B)' when its anonymous memory
  as the trainer connected (before it made anything there) exceeded its own when it was fresh (its identity's) by
  more than HELD_MARGIN and a tenth of its budget; else None. Such a worker kept memory of an earlier trainer
  (worker_lease.py)."""
  fresh = (mesh.identities.get(task) or {}).get('fresh_anon')
  first = mesh.at_connect.get(task) or {}
  start, limit = first.get('anon'), first.get('limit') or 0
  if not fresh or not start or start - fresh <= max(HELD_MARGIN, limit / 10):
    return None
  return ('worker task %d began this run holding %s more than when it started (%s, against %s fresh), memory an '
          'earlier trainer left there' % (task, byte_sizes.Format(start - fresh), byte_sizes.Format(start),
                                          byte_sizes.Format(fresh)))


class Monitor:
  """Reads every worker's memory every `interval_s` on a thread; `last` holds the latest report of each."""

  def __init__(self, mesh, interval_s=2.0):
    self.mesh, self.interval_s = mesh, interval_s
    self.last = {}
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._Run, daemon=True)

  def __enter__(self):
    self.Poll()
    self._thread.start()
    return self

  def __exit__(self, *unused):
    self._stop.set()

  def Poll(self):
    for task, _ in self.mesh.Tasks():
      try:
        report = Read(self.mesh, task)
      except (tf.errors.OpError, ValueError):
        continue
      earlier = self.last.get(task)
      if earlier and earlier['peak'] is not None and report['peak'] is not None:
        report['peak'] = max(report['peak'], earlier['peak'])  # A charge's peak: the largest sampled.
      self.last[task] = report

  def _Run(self):
    while not self._stop.wait(self.interval_s):
      self.Poll()

  def Summary(self):
    """'task 0 1.21/1.50 GiB, task 1 1.10 GiB' (peak / budget, in GiB), or '' before any report."""
    parts = []
    for task in sorted(self.last):
      r = self.last[task]
      parts.append('task %d %.2f%s GiB' % (task, (r['peak'] or 0) / 2**30,
                                          '/%.2f' % (r['limit'] / 2**30) if r['limit'] else ''))
    return ', '.join(parts)


def DeathCause(mesh, task, last=None, wait_s=3.0):
  """Why worker `task`, which no longer answers, died, if memory: its guard's verdict where it ran on this host (waited
  for up to wait_s), else its last report `last` near its budget. None when nothing says memory."""
  identity = mesh.identities.get(task) or {}
  budget = _Budget(mesh, task)
  if identity.get('host') == socket.gethostname() and isinstance(identity.get('pid'), int) and budget:
    deadline = time.time() + wait_s
    verdict = memory_cgroup.Verdict(identity['pid'])
    while verdict is None and time.time() < deadline:
      time.sleep(0.1)
      verdict = memory_cgroup.Verdict(identity['pid'])
    if verdict is not None:
      if not verdict.get('oom_killed'):
        return None
      return 'it ran out of memory: the kernel killed it at its budget of %s (%s%s)' % (
          byte_sizes.Format(verdict['limit']), verdict.get('source', '--memory_limit'),
          '; peak %s' % byte_sizes.Format(verdict['peak']) if verdict.get('peak') else '')
  if last and last.get('limit') and last.get('current') and last['current'] >= NEAR_BUDGET * last['limit']:
    return ('it most likely ran out of memory: %.0f s before, it used %s of its %s budget' % (
        time.time() - last['time'], byte_sizes.Format(last['current']), byte_sizes.Format(last['limit'])))
  return None
