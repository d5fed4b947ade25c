"""One writer per logdir: an OS file lock held by the training process for its whole run.

Two trainers on one logdir would interleave and overwrite each other's checkpoints and leave params.txt describing
only one of them. `flock` on <logdir>/LOCK is held while a run trains; the kernel releases it when the process ends
however it ends (kill -9 included), so a stale lock cannot outlive its holder. The file records the holder (pid,
host, start time, command) so a second writer can name it. Evaluation, decoding and export read checkpoints and
write only their own outputs; they take no lock and may run while training goes on.

On filesystems without working locks (some network and FUSE filesystems) the run goes on and says it is unguarded.
"""

import datetime
import errno
import fcntl
import os
import re
import socket
import sys

from lingpipe.core import errors
from lingpipe.core import processes

LOCK_FILE = 'LOCK'


def _Holder(path):
  try:
    with open(path) as f:
      return f.read().strip()
  except OSError:
    return ''


def _Condition(holder):
  """'which is running', or stopped, of the holder recorded as 'pid N on host H ...' (where /proc can say)."""
  m = re.match(r'^pid (\d+) on host (\S+) ', holder)
  return processes.Condition(int(m.group(1)), m.group(2)) if m else 'which is running'


class LogdirLock:
  """Context manager: holds <logdir>/LOCK for writing, or raises LogdirBusyError naming the holder."""

  def __init__(self, logdir, out=None):
    self.logdir, self.out = logdir, out
    self.path = os.path.join(logdir, LOCK_FILE)
    self._fd = None
    self._made = []  # The folders and the LOCK file this lock created, which a refused run takes back.

  def __enter__(self):
    folder = os.path.abspath(self.logdir)
    while folder and not os.path.lexists(folder):
      self._made.insert(0, folder)
      folder = os.path.dirname(folder)
    try:
      os.makedirs(self.logdir, exist_ok=True)
      if not os.path.lexists(self.path):
        self._made.append(self.path)
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
      raise errors.FileSystemError('Cannot train in --logdir %s: %s (%s); nothing was changed. Training needs a '
                                   'folder it can write.' % (self.logdir, e.strerror, e.filename or self.path)) from e
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      os.close(fd)
      if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
        holder = _Holder(self.path)
        raise errors.LogdirBusyError(
            'Logdir %s is being trained by %s; nothing was changed. Wait for that run to finish or stop it, or use '
            'another --logdir (--mode=eval, decode and export may run meanwhile).' % (
                self.logdir, '%s, %s' % (holder, _Condition(holder)) if holder else
                'a process that has not yet recorded itself')) from e
      print('Note: %s cannot be locked (%s); nothing stops a second trainer from writing this logdir.' % (
          self.path, os.strerror(e.errno)), file=self.out, flush=True)
      return self
    self._fd = fd
    holder = 'pid %d on host %s (since %s: %s)' % (
        os.getpid(), socket.gethostname(), datetime.datetime.now().isoformat(timespec='seconds'),
        ' '.join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv)))
    try:
      os.ftruncate(fd, 0)
      os.pwrite(fd, (holder + '\n').encode(), 0)
    except OSError:  # A full disk: the lock holds all the same; a second writer just cannot name us.
      pass
    return self

  def __exit__(self, exc_type, *unused):
    if exc_type is not None and issubclass(exc_type, errors.UserError):
      self._TakeBack()  # While the lock is held: no other writer is between its open and its flock of LOCK.
    if self._fd is not None:
      os.close(self._fd)  # Releases the lock; the file stays (its content is only read by a blocked writer).
      self._fd = None

  def _TakeBack(self):
    """A run refused with a UserError leaves no trace of its own: the LOCK file it made, or one that is all the
    logdir holds (another trainer, refused at the same moment, made it), and the folders it made where they are
    empty then (a run that wrote checkpoints before the error keeps them and their folders)."""
    try:
      if self.path in self._made or os.listdir(self.logdir) == [LOCK_FILE]:
        os.remove(self.path)
    except OSError:
      return
    for path in reversed([p for p in self._made if p != self.path]):
      try:
        os.rmdir(path)  # Only an empty folder.
      except OSError:
        return
