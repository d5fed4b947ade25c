"""Checkpoints and the logdir: resume from the newest complete checkpoint, restore exactly a model's variables, and
clear errors for checkpoints that cannot be used. Nothing a run did not write itself is overwritten or deleted.

`tf.train.CheckpointManager` writes a checkpoint's data files and .index, then names it in the `checkpoint` index
(each step atomic). What can go wrong, and what lingpipe does:
  - killed mid-save: the index still names the previous checkpoint, and training resumes from it; a save that
    completed but missed the index (killed between the two) is adopted into it.
  - the index lost or unreadable: training rebuilds it from the complete checkpoints on disk and says so (it used
    to start over from step 0 and write new ckpt-N over the old ones); eval, decode and export read the disk.
  - the newest checkpoint corrupt or truncated: training moves its files into train/corrupt/ and resumes from the
    newest one that restores, saying so; eval, decode and export name that one for --checkpoint_path.
  - the newest checkpoint diverged (its weights give a non-finite loss): training stops and moves its files into
    train/diverged/, so the next run resumes from the one before and eval, decode and export never use it.
  - a checkpoint of another model: resuming requires an exact match (variable_restore.py); eval, decode and export
    require every variable of the task to be in the checkpoint and every task variable of the checkpoint to be in
    the model (`CheckTaskVariables`). Partial restores are only for init_from_checkpoint, where they are explicit.
A logdir belongs to one model, recorded in params.txt, which always describes the checkpoints beside it.
"""

import os
import re
import shutil

import tensorflow as tf
from google.protobuf import text_format

from lingpipe.core import errors
from lingpipe.logdir import recorded_params
from lingpipe.logdir import safe_write
from lingpipe.logdir import variable_restore

PARAMS_FILE = 'params.txt'
PENDING_PARAMS_FILE = 'params.pending.txt'
TRAIN_DIR = 'train'
INDEX_FILE = 'checkpoint'
_CHECKPOINT_INDEX = re.compile(r'^(.+)-(\d+)\.index$')
_DATA_SHARD = re.compile(r'\.data-(\d+)-of-(\d+)$')
_CHECKPOINT_FILE = re.compile(r'^\.(index|data-\d+-of-\d+)$')
_TEMP_CHECKPOINT = re.compile(r'^ckpt-\d+_temp$')
# TensorFlow writes the index as `checkpoint.tmp<uuid hex>` and renames it (file_io.atomic_write_string_to_file).
_TEMP_INDEX = re.compile(r'^checkpoint\.tmp[0-9a-f]{32}$')
_VALUE_SUFFIX = '/.ATTRIBUTES/VARIABLE_VALUE'


class CorruptCheckpointError(errors.CheckpointError):
  """A checkpoint whose files are truncated, damaged or missing."""


def _ReadText(path, what):
  """The text of file `path`, None if there is none, or one line naming the path and why it does not read."""
  try:
    with open(path, encoding='utf-8') as f:
      return f.read()
  except FileNotFoundError:
    return None
  except (OSError, UnicodeDecodeError) as e:
    cause = e.strerror if isinstance(e, OSError) else 'not UTF-8 text'
    raise errors.FileSystemError('Cannot read %s %s: %s. Move it aside if it is not lingpipe\'s.' % (
        what, path, cause)) from e


def _Pending(logdir):
  """(step, text) of logdir/params.pending.txt: the params of the checkpoints after `step`, or None."""
  text = _ReadText(os.path.join(logdir, PENDING_PARAMS_FILE), 'params')
  m = re.match(r'# after step (\d+)\n', text or '')
  return (int(m.group(1)), text[m.end():]) if m else None


def _SavedWith(logdir, pending):
  """The newest complete checkpoint if it was saved with the `pending` params (it is after their step), else
  None."""
  latest = LatestCheckpoint(os.path.join(logdir, TRAIN_DIR))
  return latest if latest and Step(latest) > pending[0] else None


def RecordedParamsText(logdir):
  """The params text of the newest checkpoints in `logdir`: params.txt, or the pending params of a run killed
  after a save and before it recorded them (see StageParams). None for a logdir without params."""
  pending = _Pending(logdir)
  if pending and _SavedWith(logdir, pending):
    text, path = pending[1], os.path.join(logdir, PENDING_PARAMS_FILE)
  else:
    path = os.path.join(logdir, PARAMS_FILE)
    text = _ReadText(path, 'params')
  if text is not None:
    recorded_params.Check(text, path)
  return text


def RecordedModel(logdir):
  """The model name recorded in `logdir`'s params (a logdir or an export folder), or None."""
  m = re.search(r"^model : '([^']*)'", RecordedParamsText(logdir) or '', re.M)
  return m.group(1) if m else None


def CheckLogdirModel(logdir, model):
  """Raises CheckpointError if `logdir` already belongs to a different model (or is a file)."""
  try:
    is_folder = os.path.isdir(os.path.realpath(logdir, strict=True))
  except FileNotFoundError:
    is_folder = None if not os.path.islink(logdir) else False  # Missing: made later; a dangling link: refused.
  except OSError as e:
    raise errors.FileSystemError('Cannot use --logdir %s: %s; nothing was changed. Give a folder path.' % (
        logdir, e.strerror)) from e
  if is_folder is False:
    raise errors.FileSystemError('--logdir %s is %s, not a folder; nothing was changed. Give a folder path.' % (
        logdir, 'a broken or looping symlink' if os.path.islink(logdir) else 'a file'))
  recorded = RecordedModel(logdir)
  if recorded is not None and recorded != model:
    raise errors.CheckpointError(
        'Logdir %s holds model %s (see %s), not %s; nothing was changed. Use another --logdir, or delete that '
        'one to start over.' % (logdir, recorded, os.path.join(logdir, PARAMS_FILE), model))


# -- params.txt: committed with the first checkpoint that used it ------------------------------------------------
def StageParams(logdir, params, resumed_step):
  """Before a run's first save: if `params` differ from params.txt, keeps the earlier text as
  params.step_<resumed_step>.txt (never overwriting another one) and writes the new text to params.pending.txt.
  params.txt itself changes only in CommitParams, once a checkpoint of the new params is complete, so it always
  describes the checkpoints beside it. Returns whether there is anything to commit."""
  path = os.path.join(logdir, PARAMS_FILE)
  text, old = params.ToText(), _ReadText(path, 'params')
  pending = os.path.join(logdir, PENDING_PARAMS_FILE)
  if old == text:
    if os.path.exists(pending):
      os.remove(pending)
    return False
  if old is not None:
    kept = _KeptParamsPath(logdir, resumed_step, old)
    if not os.path.exists(kept):
      safe_write.AtomicWrite(kept, old, 'params')
  safe_write.AtomicWrite(pending, '# after step %d\n%s' % (resumed_step, text), 'params')
  return True


def _KeptParamsPath(logdir, step, text):
  """params.step_<step>.txt, or the first params.step_<step>-<n>.txt that is free or already holds `text`."""
  n, path = 1, os.path.join(logdir, 'params.step_%d.txt' % step)
  while os.path.exists(path) and _ReadText(path, 'params') != text:
    n += 1
    path = os.path.join(logdir, 'params.step_%d-%d.txt' % (step, n))
  return path


def CommitParams(logdir):
  """After a save: params.txt takes the pending params (if any). Returns a line saying what changed, or None."""
  pending = _Pending(logdir)
  if pending is None:
    return None
  resumed_step, text = pending
  path = os.path.join(logdir, PARAMS_FILE)
  old = _ReadText(path, 'params')
  safe_write.AtomicWrite(path, text, 'params')
  os.remove(os.path.join(logdir, PENDING_PARAMS_FILE))
  if old is None:
    return None
  changed = sorted({line.split(' : ')[0] for line in set(text.splitlines()) ^ set(old.splitlines())})
  return 'Params changed since step %d (%s); the earlier ones are in %s.' % (
      resumed_step, ', '.join(changed[:6]) + (', ...' if len(changed) > 6 else ''),
      _KeptParamsPath(logdir, resumed_step, old))


def RecoverParams(logdir):
  """At the start of a run (holding the lock): commits the pending params of a run killed after its save, or drops
  those of a run whose save never completed. Returns a line saying which, or None."""
  pending = _Pending(logdir)
  if pending is None:
    return None
  latest = _SavedWith(logdir, pending)
  if latest:
    CommitParams(logdir)
    return 'Recorded in %s the params of %s (the run that saved it was stopped before it could).' % (
        os.path.join(logdir, PARAMS_FILE), os.path.basename(latest))
  os.remove(os.path.join(logdir, PENDING_PARAMS_FILE))
  return None


def RemoveTemporaryCheckpoints(train_dir):
  """Removes what TensorFlow's killed saves left: ckpt-N_temp folders and the index's checkpoint.tmp<hex> files
  (only the lock holder writes train/, so none is a live save's)."""
  if not os.path.isdir(train_dir):
    return []
  removed = []
  for name in sorted(os.listdir(train_dir)):
    path = os.path.join(train_dir, name)
    if _TEMP_CHECKPOINT.match(name) and os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path, ignore_errors=True)
    elif _TEMP_INDEX.match(name) and os.path.isfile(path) and not os.path.islink(path):
      os.remove(path)
    else:
      continue
    removed.append(name)
  return removed


def Options():
  """CheckpointOptions for this process: None, TensorFlow's default, which saves and restores each variable with
  ops on its own task (a shard per task, merged into one checkpoint), so no variable's value passes through the
  trainer; on a remote cluster every task must see the logdir at the same path (shared_logdir.py)."""
  return None


# -- what is on disk ---------------------------------------------------------------------------------------------
def CheckpointFiles(prefix):
  """The files of checkpoint `prefix` (its .index and data shards, nothing else of the same name), sorted."""
  directory, name = os.path.split(prefix)
  if not os.path.isdir(directory):
    return []
  return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                if f.startswith(name + '.') and _CHECKPOINT_FILE.match(f[len(name):]))


def Step(prefix):
  m = re.search(r'-(\d+)$', prefix)
  return int(m.group(1)) if m else -1


def Incomplete(prefix):
  """Why checkpoint `prefix` cannot be complete ('' if its .index reads and all its data shards exist)."""
  files = [os.path.basename(f) for f in CheckpointFiles(prefix)]
  name = os.path.basename(prefix)
  if name + '.index' not in files:
    return 'no %s.index (found: %s)' % (name, ', '.join(files) or 'nothing')
  shards = [_DATA_SHARD.search(f) for f in files]
  counts = {int(m.group(2)) for m in shards if m}
  if len(counts) != 1 or len([m for m in shards if m]) != counts.pop():
    return 'data shards missing (found: %s)' % ', '.join(files)
  try:
    tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    return 'unreadable %s.index (%s)' % (name, str(e).strip().splitlines()[0])
  return ''


def CompleteOnDisk(train_dir):
  """Prefixes of the complete checkpoints in `train_dir`, oldest first."""
  if not os.path.isdir(train_dir):
    return []
  prefixes = []
  for f in os.listdir(train_dir):
    m = _CHECKPOINT_INDEX.match(f)
    if m:
      prefixes.append(os.path.join(train_dir, '%s-%s' % (m.group(1), m.group(2))))
  return sorted((p for p in prefixes if not Incomplete(p)), key=Step)


def _Indexed(train_dir):
  """(latest, all prefixes) of the index, None when there is none; raises ValueError if it is unreadable."""
  if not os.path.exists(os.path.join(train_dir, INDEX_FILE)):
    return None
  try:
    state = tf.train.get_checkpoint_state(train_dir)
  except (tf.errors.OpError, text_format.ParseError) as e:
    raise ValueError(str(e).strip().splitlines()[0]) from e
  if state is None:
    return None
  return state.model_checkpoint_path, list(state.all_model_checkpoint_paths)


def Candidates(train_dir):
  """(complete checkpoints newest first, lines about what the index says that the disk does not)."""
  notes = []
  try:
    indexed = _Indexed(train_dir)
  except ValueError as e:
    indexed = None
    notes.append('the index is unreadable (%s)' % e)
  complete = CompleteOnDisk(train_dir)
  if indexed is None:
    if complete and not notes:
      notes.append('the index is missing')
  else:
    for prefix in sorted(set(p for p in [indexed[0]] + indexed[1] if p) - set(complete), key=Step):
      notes.append('%s (named by the index) is incomplete: %s' % (os.path.basename(prefix), Incomplete(prefix)))
    latest_step = Step(indexed[0]) if indexed[0] else -1
    newer = [p for p in complete if Step(p) > latest_step and p not in indexed[1]]
    if newer:
      notes.append('%s %s complete but missing from the index (a run killed while saving)' % (
          ', '.join(os.path.basename(p) for p in newer), 'is' if len(newer) == 1 else 'are'))
  return complete[::-1], notes


def WriteIndex(train_dir, prefixes):
  """Makes the index name `prefixes` (oldest first), the last as the latest."""
  if not prefixes:
    path = os.path.join(train_dir, INDEX_FILE)
    if os.path.exists(path):
      os.remove(path)
    return
  # The CheckpointState text CheckpointManager writes, paths relative to train_dir. The manager rotates (keeps
  # checkpoints_to_keep of) only entries with a timestamp, so each gets its .index file's time.
  lines = ['model_checkpoint_path: "%s"' % os.path.basename(prefixes[-1])]
  lines += ['all_model_checkpoint_paths: "%s"' % os.path.basename(p) for p in prefixes]
  lines += ['all_model_checkpoint_timestamps: %f' % os.path.getmtime(p + '.index') for p in prefixes]
  safe_write.AtomicWrite(os.path.join(train_dir, INDEX_FILE), '\n'.join(lines) + '\n', 'checkpoint index')


def LatestCheckpoint(train_dir):
  """The newest complete checkpoint in `train_dir` (by the index and the disk), or None. Read-only: eval, decode
  and export use it while training may be writing."""
  complete, _ = Candidates(train_dir)
  return complete[0] if complete else None


# -- restoring ---------------------------------------------------------------------------------------------------
def _TaskVariableKeys(root):
  """{checkpoint key less _VALUE_SUFFIX: variable} of the variables under root's 'task'."""
  return {k[:-len(_VALUE_SUFFIX)]: v for k, v in variable_restore.VariableKeys(root).items()
          if k.startswith('task/')}


def CheckTaskVariables(root, path):
  """Raises CheckpointError unless checkpoint `path` holds exactly the task variables of `root` (a
  tf.train.Checkpoint with a `task`), with the same shapes."""
  model = _TaskVariableKeys(root)
  stored = {name[:-len(_VALUE_SUFFIX)]: shape for name, shape in tf.train.list_variables(path)
            if name.startswith('task/') and name.endswith(_VALUE_SUFFIX) and '/.OPTIMIZER_SLOT/' not in name}
  missing = sorted(set(model) - set(stored))
  extra = sorted(set(stored) - set(model))
  shapes = sorted(k for k in set(model) & set(stored) if list(model[k].shape) != list(stored[k]))
  problems = []
  for what, keys in (('not in the checkpoint', missing), ('in the checkpoint but not in this model', extra)):
    if keys:
      problems.append('%d variable(s) %s (%s%s)' % (len(keys), what, ', '.join(keys[:4]),
                                                    ', ...' if len(keys) > 4 else ''))
  if shapes:
    problems.append('%d of other shapes (%s: checkpoint %s, model %s%s)' % (
        len(shapes), shapes[0], stored[shapes[0]], model[shapes[0]].shape.as_list(), ', ...' if len(shapes) > 1
        else ''))
  if problems:
    raise errors.CheckpointError('Checkpoint %s does not match this model: %s. Is it a checkpoint of another model '
                                 'or configuration? (init_from_checkpoint loads some variables on purpose.)' % (
                                     path, '; '.join(problems)))


class MissingCheckpointError(errors.CheckpointError):
  """A checkpoint path with no files."""


class VanishedCheckpointError(errors.CheckpointError):
  """A checkpoint whose files were deleted while it was read (rotated away by a training run)."""


def _Vanished(path, files):
  """A VanishedCheckpointError if some of `files` (checkpoint `path`'s, when first listed) are gone, else None."""
  gone = [f for f in files if not os.path.exists(f)]
  if not gone:
    return None
  return VanishedCheckpointError(
      'Checkpoint %s was deleted while it was read (%s gone): a training run in %s rotated it away '
      '(task.train.checkpoints_to_keep). Rerun, or pass a checkpoint that is kept.' % (
          path, ', '.join(os.path.basename(f) for f in gone), os.path.dirname(path) or '.'))


def Restore(checkpoint, path, exact_task=False):
  """Restores tf.train.Checkpoint `checkpoint` from `path`.

  exact_task=False (resuming training): the checkpoint and the objects must match exactly. exact_task=True
  (evaluation, decoding, export, which have no optimizer or input; a resume whose input starts over): the task's
  variables must be exactly the checkpoint's task variables, and every object of `checkpoint` must be in it.
  Damaged files raise CorruptCheckpointError; files deleted meanwhile VanishedCheckpointError; a mismatch
  CheckpointError.
  """
  listed = CheckpointFiles(path)
  if not listed:
    there = [os.path.basename(p) for p in CompleteOnDisk(os.path.dirname(path))]
    raise MissingCheckpointError('There is no checkpoint %s (no files %s.*); %s has %s.' % (
        path, os.path.basename(path), os.path.dirname(path) or '.', ', '.join(there) or 'no complete checkpoint'))
  reason = Incomplete(path)
  if reason:
    raise _Vanished(path, listed) or CorruptCheckpointError('Checkpoint %s is incomplete: %s.' % (path, reason))
  files = ', '.join(os.path.basename(f) for f in listed)
  try:
    if exact_task:
      CheckTaskVariables(checkpoint, path)
    variable_restore.Restore(checkpoint, path, exact=not exact_task, options=Options())
  except (tf.errors.OpError, IndexError, EOFError) as e:
    first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise _Vanished(path, listed) or CorruptCheckpointError('Checkpoint %s (files: %s) is corrupt or truncated: '
                                                            '%s.' % (path, files, first_line)) from e
  except (AssertionError, ValueError) as e:  # Unmatched objects, or a variable of another shape.
    if isinstance(e, errors.UserError):
      raise
    detail = str(e).strip().splitlines()[0][:300]
    raise errors.CheckpointError('Checkpoint %s does not match this model (different variables or shapes): '
                                 '%s. Use a fresh --logdir for a changed model.' % (path, detail)) from e
