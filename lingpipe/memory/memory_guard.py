"""The guard of a budgeted process (memory_budget.py): outside the budget, it waits for the process to end. For
lingpipe-train it is the process's own parent (a fork, so its line comes before the shell's prompt and its exit
status is the trainer's); for a worker and an inherited budget, a small process started beside it.

When the kernel killed the process for its budget (the cgroup's oom_kill count rose), the guard prints one line on
the stderr it shares with the process (the terminal of lingpipe-train, the log of a lingpipe-worker): what died,
its budget and peak, the last checkpoint and a configuration that fits, as the process told it (memory_budget.Tell).
It leaves the same facts as a verdict file (<tmp>/lingpipe-memory-<uid>/<pid>.json, only after such a death; removed
after a day) that a trainer on this host reads to name a worker's death, and removes the cgroup the process made.
It ignores the signals that stop the process, so it is there to say what happened.

    python -m lingpipe.memory.memory_guard --pid=PID --budget=JSON --name=NAME [--remove]
"""

import argparse
import json
import os
import select
import signal
import sys
import threading
import time

from lingpipe.core import byte_sizes
from lingpipe.core import processes
from lingpipe.memory import memory_cgroup


def _WaitForExit(pid):
  """Returns once process `pid` has ended."""
  try:
    fd = os.pidfd_open(pid)
  except (AttributeError, OSError):
    fd = None
  if fd is not None:
    select.select([fd], [], [])
    os.close(fd)
    return
  while processes.Alive(pid):
    time.sleep(0.2)


def _ReadFacts(stream, facts):
  """Keeps the latest of each fact the process sends on `stream`, until it closes."""
  for line in stream:
    try:
      facts.update(json.loads(line))
    except ValueError:
      continue


def _Message(name, budget, usage, facts):
  peak = usage.get('peak')
  line = ('%s: error: killed by the kernel: it ran out of memory, its budget of %s (%s)%s.' % (
      facts.get('name', name), byte_sizes.Format(budget.limit), budget.source,
      ', peak %s' % byte_sizes.Format(peak) if peak else ''))
  if facts.get('checkpoint'):
    line += ' The last checkpoint, %s, is whole; the same command resumes from it.' % facts['checkpoint']
  elif 'checkpoint' in facts:
    line += ' No checkpoint was written yet.'
  if facts.get('advice'):
    line += ' ' + facts['advice']
  return line


def _WriteVerdict(pid, verdict):
  path = memory_cgroup.VerdictPath(pid)
  os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
  tmp = '%s.tmp-%d' % (path, os.getpid())
  with open(tmp, 'w') as f:
    json.dump(verdict, f)
  os.replace(tmp, path)
  for name in os.listdir(os.path.dirname(path)):  # Verdicts nobody read within a day.
    other = os.path.join(os.path.dirname(path), name)
    try:
      if time.time() - os.path.getmtime(other) > 86400:
        os.remove(other)
    except OSError:
      pass


def _Remove(folder):
  """rmdir of the process's cgroup, retried while the kernel lets its last pages go (or its children end)."""
  for _ in range(100):
    try:
      os.rmdir(folder)
      return
    except FileNotFoundError:
      return
    except OSError:
      time.sleep(0.1)


def Report(pid, budget, name, facts, oom_kills_before, remove):
  """After process `pid` ended: the line if its budget killed it, the verdict file, the cgroup removed (if
  `remove`). Returns whether the budget killed it."""
  usage = memory_cgroup.Usage(budget)
  killed = (usage.get('oom_kills') or 0) > oom_kills_before
  verdict = dict(facts, oom_killed=killed, limit=budget.limit, source=budget.source, peak=usage.get('peak'),
                 time=time.time())
  try:
    if killed:  # Only a death by the budget leaves a file: a reader waits a moment for one, then takes none as no.
      print(_Message(name, budget, usage, facts), file=sys.stderr, flush=True)
      _WriteVerdict(pid, verdict)
    elif os.path.exists(memory_cgroup.VerdictPath(pid)):  # An earlier process's of the same pid.
      os.remove(memory_cgroup.VerdictPath(pid))
  except OSError:
    pass
  if remove and budget.cgroup:
    _Remove(budget.cgroup)
  return killed


def Supervise(child, budget, name, facts_fd):
  """In the parent of a forked budgeted process (memory_budget.Apply(supervise=True)): passes the stop signals on to
  `child`, waits for it, reports (Report), and returns the exit status to end with (the child's; 128 + its signal)."""
  for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, lambda signum, unused_frame: _Forward(child, signum))
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # A terminal's Ctrl-C reaches the child itself (same group).
  before = memory_cgroup.Usage(budget).get('oom_kills') or 0
  facts = {}
  threading.Thread(target=_ReadFacts, args=(os.fdopen(facts_fd), facts), daemon=True).start()
  while True:
    try:
      _, status = os.waitpid(child, 0)
      break
    except InterruptedError:
      continue
  time.sleep(0.05)  # The last facts, written just before the end.
  Report(child, budget, name, facts, before, remove=True)
  return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _Forward(pid, signum):
  try:
    os.kill(pid, signum)
  except ProcessLookupError:
    pass


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--pid', type=int, required=True)
  parser.add_argument('--budget', required=True, help='The Budget as JSON.')
  parser.add_argument('--name', default='process')
  parser.add_argument('--remove', action='store_true', help='Remove the cgroup afterwards (the process made it).')
  args = parser.parse_args(argv)
  for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
  budget = memory_cgroup.Budget(**json.loads(args.budget))
  before = memory_cgroup.Usage(budget).get('oom_kills') or 0
  facts = {}
  threading.Thread(target=_ReadFacts, args=(sys.stdin, facts), daemon=True).start()
  _WaitForExit(args.pid)
  time.sleep(0.05)  # The last facts, written just before the end.
  Report(args.pid, budget, args.name, facts, before, args.remove)
  return 0


if __name__ == '__main__':
  sys.exit(main())
