"""Which folders lingpipe may replace whole: only those that hold nothing but what lingpipe itself writes there.

An export, a decode's `step_N/` and a data tool's output folder are swapped out whole by their next write
(safe_write.AtomicDirectory). Before that, each writer names what it writes (`is_own`), and anything else found in
or below the folder -- a user's notes, a training run, an empty folder of theirs, a symlink -- refuses the write
with one line naming it.
"""

import os

from lingpipe.core import errors


def ForeignEntries(folder, is_own):
  """Relative paths in or below `folder` that `is_own(relative_path, is_dir)` does not claim, sorted; a foreign
  folder is listed once, not what is inside it. Symlinks are never followed (and never claimed)."""
  foreign = []

  def Walk(relative):
    try:
      entries = sorted(os.scandir(os.path.join(folder, relative) if relative else folder), key=lambda e: e.name)
    except OSError as e:
      raise errors.FileSystemError('Cannot read %s: %s; nothing was written or deleted.' % (
          os.path.join(folder, relative), e.strerror)) from e
    for entry in entries:
      path = os.path.join(relative, entry.name) if relative else entry.name
      is_dir = entry.is_dir(follow_symlinks=False)
      if entry.is_symlink() or not is_own(path, is_dir):
        foreign.append(path + (os.sep if is_dir else ''))
      elif is_dir:
        Walk(path)

  Walk('')
  return foreign


def Describe(paths, limit=5):
  """'a, b/, c' (and how many more) for a list of relative paths."""
  shown = ', '.join(paths[:limit])
  return shown + (' and %d more' % (len(paths) - limit) if len(paths) > limit else '')


def CheckOnlyOwn(folder, is_own, what, name=None):
  """Raises a ConfigError unless everything in or below `folder` is what lingpipe writes there (`is_own`). `what`
  says what the folder is ('an earlier export of synthetic.Mlp'); `name` how the user gave it (a flag)."""
  foreign = ForeignEntries(folder, is_own)
  if foreign:
    raise errors.ConfigError(
        '%s holds %s and also what lingpipe did not write there (%s); nothing was written or deleted. Move %s out, '
        'or write elsewhere.' % (name or folder, what, Describe(foreign), 'it' if len(foreign) == 1 else 'them'))


def MarkerFiles(folder, marker):
  """The relative paths a tool listed in its marker file (one per line after a '#' header), or None if the marker
  lists none (a folder written before markers listed their files)."""
  try:
    with open(os.path.join(folder, marker), encoding='utf-8') as f:
      listed = [line.strip() for line in f if line.strip() and not line.startswith('#')]
  except (OSError, UnicodeDecodeError):
    return None
  return set(listed) or None


def MarkerText(header, files):
  """The text of a marker file: a '#' header line, then the relative paths of the files the tool wrote."""
  return '# %s\n%s' % (header, ''.join('%s\n' % f for f in sorted(files)))
