"""Temporary names beside a target, the removal of those a killed writer left, and swapping a folder into place.

A temporary is named `.<target>.tmp-<host>-<pid>-<random>` (being filled) or `.<target>.old-<host>-<pid>-<random>`
(a replaced folder set aside), so a later writer can tell its own kind of litter from anything else, and a dead
writer's from a live one's: only names of this form, made on this host by a process that no longer runs, are
removed. An `.old-` folder whose target is missing (killed between the two renames of a swap, where the filesystem
cannot exchange two folders in one step) is put back rather than removed.
"""

import ctypes
import errno
import os
import re
import secrets
import shutil
import socket

from lingpipe.core import processes

_NAME = re.compile(r'^\.(?P<target>.+)\.(?P<kind>tmp|old)-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{8}$')
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _Host():
  return re.sub(r'[^A-Za-z0-9.]', '_', socket.gethostname()) or 'host'


def Name(path, kind='tmp'):
  """A fresh temporary path beside `path` (kind 'tmp' or 'old')."""
  directory, base = os.path.split(os.path.abspath(path))
  return os.path.join(directory, '.%s.%s-%s-%d-%s' % (base, kind, _Host(), os.getpid(), secrets.token_hex(4)))


def _Remove(path):
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path, ignore_errors=True)
  elif os.path.lexists(path):
    os.remove(path)


def RemoveLeftovers(directory):
  """Removes the temporaries in `directory` whose writer (on this host) is dead, and puts back a set-aside folder
  whose target is missing. Returns the names removed or restored. Errors (a read-only folder) are left to the
  write that follows."""
  try:
    names = os.listdir(directory)
  except OSError:
    return []
  host, done = _Host(), []
  for name in names:
    m = _NAME.match(name)
    if not m or m.group('host') != host or processes.Alive(int(m.group('pid'))):
      continue
    path, target = os.path.join(directory, name), os.path.join(directory, m.group('target'))
    try:
      if m.group('kind') == 'old' and not os.path.lexists(target):
        os.rename(path, target)
      else:
        _Remove(path)
    except OSError:
      continue
    done.append(name)
  return done


def _Exchange(a, b):
  """Swaps paths a and b in one step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = libc.renameat2
  except (OSError, AttributeError):
    return False
  if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
    return True
  code = ctypes.get_errno()
  if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
    return False
  raise OSError(code, os.strerror(code), b)


def SwapInto(tmp, path):
  """Moves folder `tmp` to `path`, replacing the folder there: at every instant `path` is the old folder or the new
  one, whole (where the filesystem can exchange; elsewhere a kill between two renames leaves the old one under an
  `.old-` name that the next writer puts back)."""
  if not os.path.lexists(path):
    os.rename(tmp, path)
    return
  if _Exchange(tmp, path):
    _Remove(tmp)  # It now holds the old folder.
    return
  aside = Name(path, 'old')
  os.rename(path, aside)
  os.rename(tmp, path)
  _Remove(aside)
