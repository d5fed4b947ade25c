"""What this host's /proc says of a process: its state letter, whether it runs, when it started (to tell a reused
pid from the process that held it)."""

import os
import socket


def _Stat(pid):
  """The fields of /proc/<pid>/stat after the command name (which may hold spaces and ends at the last ')'), or
  None where there is no such process (or no /proc)."""
  try:
    with open('/proc/%s/stat' % pid) as f:
      return f.read().rsplit(')', 1)[1].split()
  except (OSError, IndexError):
    return None


def State(pid):
  """Process `pid`'s state letter (R, S, D, T, t, Z, X, ...), or None where it does not exist (or /proc does not
  say: then os.kill tells whether it exists, 'S' for one that does)."""
  fields = _Stat(pid)
  if fields:
    return fields[0]
  if os.path.isdir('/proc/self'):
    return None
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return None
  except OSError:  # EPERM: it runs, as another user.
    pass
  return 'S'


def Alive(pid, start=None):
  """Whether process `pid` runs (a zombie does not) and, where `start` is given (StartTime's), is the same process."""
  if State(pid) in (None, 'Z', 'X'):
    return False
  return start is None or StartTime(pid) == str(start)


def StartTime(pid='self'):
  """Process `pid`'s start time in clock ticks since boot, as text (None where /proc does not say)."""
  fields = _Stat(pid)
  return fields[19] if fields and len(fields) > 19 else None


def Stopped(pid):
  """Whether process `pid` of this host is stopped (SIGSTOP, Ctrl-Z, or a debugger): it holds what it holds, but
  makes no progress until it gets SIGCONT."""
  return State(pid) in ('T', 't')


def Condition(pid, host=None):
  """'which is running', or for a stopped process what it is and how to resume or end it. A process of another
  `host` (a name as socket.gethostname() gives it) is taken as running: this host's /proc cannot say."""
  if host is not None and host != socket.gethostname():
    return 'which is running'
  if Stopped(pid):
    return ('which is stopped (SIGSTOP or Ctrl-Z; it holds on without progress: `kill -CONT %d` resumes it, '
            '`kill %d` ends it)' % (pid, pid))
  return 'which is running'
