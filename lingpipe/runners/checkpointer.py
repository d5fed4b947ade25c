"""Checkpoints and the logdir: atomic writes, resume, and clear errors for checkpoints that cannot be used.

A logdir belongs to one model: `params.txt` records it, and a run of another model there is refused before
anything is written. Checkpoints go through `tf.train.CheckpointManager`, which writes the data files first and
the `checkpoint` index last (atomically), so a run killed mid-save resumes from the previous good checkpoint.
"""

import os
import shutil
import re
import tempfile

import tensorflow as tf
from google.protobuf import text_format

from lingpipe.core import cluster
from lingpipe.core import errors

PARAMS_FILE = 'params.txt'
TRAIN_DIR = 'train'


def _AtomicReplace(path, fill):
  """Lets fill(temporary path) write the file, then renames it to `path`, so readers never see half a file."""
  directory = os.path.dirname(path) or '.'
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.' + os.path.basename(path) + '.')
  os.close(fd)
  try:
    fill(tmp)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def AtomicWrite(path, text):
  """Writes `text` to `path` through a temporary file and a rename."""

  def Fill(tmp):
    with open(tmp, 'w') as f:
      f.write(text)

  _AtomicReplace(path, Fill)


def RecordedModel(logdir):
  """The model name recorded in logdir/params.txt, or None."""
  path = os.path.join(logdir, PARAMS_FILE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    m = re.search(r"^model : '([^']*)'", f.read(), re.M)
  return m.group(1) if m else None


def CheckLogdirModel(logdir, model):
  """Raises CheckpointError if `logdir` already belongs to a different model."""
  recorded = RecordedModel(logdir)
  if recorded is not None and recorded != model:
    raise errors.CheckpointError(
        'Logdir %s holds model %s (see %s), not %s; nothing was changed. Use another --logdir, or delete that '
        'one to start over.' % (logdir, recorded, os.path.join(logdir, PARAMS_FILE), model))


def CopyAtomically(source, path):
  """Copies a file through a temporary file and a rename."""
  _AtomicReplace(path, lambda tmp: shutil.copyfile(source, tmp))


def WriteParams(logdir, params):
  AtomicWrite(os.path.join(logdir, PARAMS_FILE), params.ToText())


def Options():
  """CheckpointOptions for this process: on a remote cluster the trainer itself reads and writes the files (so
  the logdir need not be on the workers' hosts); locally TensorFlow's default."""
  io_device = cluster.Current().io_device
  return tf.train.CheckpointOptions(experimental_io_device=io_device) if io_device else None


def _CheckpointFiles(path):
  directory = os.path.dirname(path)
  prefix = os.path.basename(path)
  if not os.path.isdir(directory):
    return []
  return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(prefix + '.'))


def Restore(checkpoint, path, partial=False):
  """Restores `checkpoint` from `path`, turning unusable checkpoints into CheckpointError.

  partial=False requires the checkpoint and the objects to match exactly (resuming training); partial=True only
  requires every object of ours to be found (evaluation and export, which have no optimizer).
  """
  files = _CheckpointFiles(path)
  if not any(f.endswith('.index') for f in files):
    raise errors.CheckpointError('Checkpoint %s is missing its .index file (found: %s). Restore its files, '
                                 'point --checkpoint_path to another checkpoint, or delete its line in %s to '
                                 'fall back to an earlier one.' % (
                                     path, ', '.join(files) or 'nothing',
                                     os.path.join(os.path.dirname(path), 'checkpoint')))
  try:
    status = checkpoint.restore(path, options=Options())
    if partial:
      status.expect_partial().assert_existing_objects_matched()
    else:
      status.assert_consumed()
  except (tf.errors.OpError, IndexError, EOFError) as e:
    first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise errors.CheckpointError('Checkpoint %s (files: %s) is corrupt or truncated: %s. Delete these files '
                                 'and the matching line in %s to fall back to the previous checkpoint.' % (
                                     path, ', '.join(os.path.basename(f) for f in files), first_line,
                                     os.path.join(os.path.dirname(path), 'checkpoint'))) from e
  except (AssertionError, ValueError) as e:  # Unmatched objects, or a variable of another shape.
    detail = str(e).strip().splitlines()[0][:300]
    raise errors.CheckpointError('Checkpoint %s does not match this model (different variables or shapes): '
                                 '%s. Use a fresh --logdir for a changed model.' % (path, detail)) from e


def LatestCheckpoint(train_dir):
  """The newest checkpoint prefix recorded in `train_dir`'s index, or None when there is none.

  A checkpoint that the index names but whose files are gone is returned all the same, so restoring it fails
  loudly rather than silently starting over; an unreadable index is a CheckpointError.
  """
  try:
    state = tf.train.get_checkpoint_state(train_dir)
  except (tf.errors.OpError, ValueError, text_format.ParseError) as e:
    raise errors.CheckpointError('The checkpoint index %s is unreadable (%s). Delete it to start over.' % (
        os.path.join(train_dir, 'checkpoint'), str(e).splitlines()[0])) from e
  if state is None or not state.model_checkpoint_path:
    return None
  return state.model_checkpoint_path  # get_checkpoint_state already resolved it against train_dir.
