"""Writing the logdir's files: atomically, with the permissions the user's umask gives, and a clear error when the
disk is full.

Readers never see half a file: text and copies go to a temporary file beside the target and are renamed over it;
a folder (a SavedModel) is filled under a temporary name and swapped into place. Temporaries a killed writer left
are removed by the next write to the same folder (temporaries.py). Each file and folder gets the mode a plain `open`
or `os.makedirs` would have given (0666 or 0777 less the umask), so a serving process of another user can read what
lingpipe wrote. A write that fails is one line naming the path and the cause (`WriteError`).
"""

import contextlib
import errno
import os
import shutil
import threading

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.logdir import replaceable
from lingpipe.logdir import temporaries

_UMASK_LOCK = threading.Lock()


def Umask():
  """The process's umask (read without changing it where /proc allows)."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('Umask:'):
          return int(line.split()[1], 8)
  except OSError:
    pass
  with _UMASK_LOCK:  # Elsewhere the only way to read it is to set it; threads are kept out meanwhile.
    mask = os.umask(0o022)
    os.umask(mask)
  return mask


def _ChmodTree(path, umask):
  """Gives `path` (a file, or a folder and everything in it) the modes of a plain create under `umask`."""
  if not os.path.isdir(path):
    os.chmod(path, 0o666 & ~umask)
    return
  os.chmod(path, 0o777 & ~umask)
  for root, dirs, files in os.walk(path):
    for d in dirs:
      os.chmod(os.path.join(root, d), 0o777 & ~umask)
    for f in files:
      os.chmod(os.path.join(root, f), 0o666 & ~umask)


def IsNoSpace(e):
  """Whether exception `e` says the disk (or quota) is full: OSError ENOSPC/EDQUOT or TensorFlow's wording."""
  if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
    return True
  return isinstance(e, tf.errors.OpError) and 'No space left on device' in str(e)


def DiskFullError(what, path, needed_bytes=None, resume_hint=''):
  """The one-line error for a full disk while writing `what` at `path`."""
  try:
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or '.').free
  except OSError:
    free = None
  need = ''
  if needed_bytes:
    need = '; it needs about %s' % _Size(needed_bytes)
    if free is not None and needed_bytes > free:
      need += ': free at least %s' % _Size(needed_bytes - free)
  return errors.DiskFullError('No space left on device writing %s %s (%s free on its filesystem%s). Nothing was '
                              'lost and the partial files were removed.%s' % (
                                  what, path, _Size(free) if free is not None else 'unknown', need, resume_hint))


def _Size(num_bytes):
  for unit in ('B', 'KiB', 'MiB', 'GiB'):
    if num_bytes < 1024 or unit == 'GiB':
      return ('%d %s' if unit == 'B' else '%.1f %s') % (num_bytes, unit)
    num_bytes /= 1024.0
  return ''


def WriteError(what, path, e):
  """The one-line error for OSError `e` while writing `what` at `path`: a full disk, or the path and the cause."""
  if IsNoSpace(e):
    return DiskFullError(what, path)
  where = getattr(e, 'filename', None) or path
  cause = (e.strerror or str(e)) if isinstance(e, OSError) else str(e).strip().splitlines()[0]
  return errors.FileSystemError('Cannot write %s %s: %s%s.' % (
      what, path, cause, '' if os.path.abspath(where) == os.path.abspath(path) else ' (%s)' % where))


def _Prepare(path, what):
  """Makes the folder of `path` and removes what killed writers left there (temporaries.RemoveLeftovers)."""
  directory = os.path.dirname(os.path.abspath(path))
  try:
    os.makedirs(directory, exist_ok=True)
  except OSError as e:
    raise WriteError(what, path, e) from e
  temporaries.RemoveLeftovers(directory)


def ReplaceAtomically(path, fill, what):
  """Lets fill(temporary path) write the file, then renames it to `path`."""
  _Prepare(path, what)
  tmp = temporaries.Name(path)
  try:
    fill(tmp)
    os.chmod(tmp, 0o666 & ~Umask())
    os.replace(tmp, path)
  except BaseException as e:
    if os.path.lexists(tmp):
      os.remove(tmp)
    if isinstance(e, OSError) and not isinstance(e, errors.UserError):
      raise WriteError(what, path, e) from e
    raise


def AtomicWrite(path, text, what='file'):
  """Writes `text` to `path` through a temporary file and a rename."""

  def Fill(tmp):
    with open(tmp, 'x', encoding='utf-8') as f:
      f.write(text)

  ReplaceAtomically(path, Fill, what)


def CopyAtomically(source, path, what='file'):
  """Copies a file through a temporary file and a rename."""
  ReplaceAtomically(path, lambda tmp: shutil.copyfile(source, tmp), what)


@contextlib.contextmanager
def AtomicDirectory(path, what='folder'):
  """Yields a temporary folder beside `path` to fill; on success it takes the place of `path` (modes per the umask;
  a folder already there is swapped out whole, temporaries.SwapInto), on any error it is removed and `path` is
  left as it was. The caller decides whether what is at `path` may be replaced."""
  _Prepare(path, what)
  tmp = temporaries.Name(path)
  try:
    os.mkdir(tmp)
    yield tmp
    _ChmodTree(tmp, Umask())
    temporaries.SwapInto(tmp, path)
  except BaseException as e:
    if isinstance(e, OSError) and not isinstance(e, errors.UserError):
      raise WriteError(what, path, e) from e
    if isinstance(e, tf.errors.OpError) and IsNoSpace(e):
      raise DiskFullError(what, path) from e
    raise
  finally:
    if os.path.lexists(tmp):
      shutil.rmtree(tmp, ignore_errors=True)


def CheckOwnFolder(path, marker, what):
  """Raises a UserError unless `path` may be replaced by a tool's output: missing, empty, or an earlier output
  holding nothing but `marker` (a file the tool writes into every folder it makes, listing what else it wrote)
  and the files it lists. Nothing is ever deleted that the tool did not write (replaceable.py)."""
  if not os.path.lexists(path):
    return
  if not os.path.isdir(path):
    raise errors.FileSystemError('%s is a file; nothing was written. Give a missing or empty folder.' % path)
  try:
    entries = sorted(os.listdir(path))
  except OSError as e:
    raise errors.FileSystemError('Cannot read %s: %s.' % (path, e.strerror)) from e
  if entries and marker not in entries:
    raise errors.ConfigError('%s holds %d entr%s (%s), not an earlier %s; nothing was written or deleted. Give a '
                             'missing or empty folder.' % (path, len(entries), 'y' if len(entries) == 1 else 'ies',
                                                          ', '.join(entries[:5]), what))
  if entries:
    listed = replaceable.MarkerFiles(path, marker) or set()
    folders = {os.path.dirname(f) for f in listed}
    folders |= {p for f in folders for p in _Ancestors(f)}
    replaceable.CheckOnlyOwn(
        path, lambda rel, is_dir: rel in folders if is_dir else rel == marker or rel in listed, 'an earlier %s' % what)


def WriteMarker(folder, marker, header):
  """Writes a tool's `marker` file into `folder` (just filled): `header`, then every file in it, which a later run
  of the tool may replace (CheckOwnFolder)."""
  files = [os.path.relpath(os.path.join(root, f), folder) for root, _, names in os.walk(folder) for f in names]
  with open(os.path.join(folder, marker), 'w', encoding='utf-8') as f:
    f.write(replaceable.MarkerText(header, files))


def _Ancestors(relative):
  """The folders above relative path `relative` ('a/b/c' -> 'a/b', 'a')."""
  parts = relative.split(os.sep)
  return [os.sep.join(parts[:i]) for i in range(1, len(parts))]
