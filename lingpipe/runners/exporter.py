"""Export: a SavedModel with one serving signature per entry of `Task.Inference()`.

The SavedModel holds the weights and the traced inference graphs only, so `tf.saved_model.load` alone serves it;
lingpipe need not be installed where it is used. By default it goes to `<logdir>/export/<step>/`: TF Serving serves
a model's base folder by its integer version subfolders (the highest by default), so `<logdir>/export` is that base.
"""

import os
import re

from google.protobuf import message
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import serving
from lingpipe.logdir import checkpointer
from lingpipe.runners import evaler
from lingpipe.logdir import replaceable
from lingpipe.logdir import safe_write
from lingpipe.logdir import temporaries

EXPORT_DIR = 'export'


def _SignatureFunction(fn, spec):
  """A tf.function of positional tensors named after the spec's keys, calling fn(**named) on the inputs once they
  pass their shape checks (serving.CheckedInputs)."""
  keys = list(spec.keys())
  signature = [tf.TensorSpec(spec[k].shape, spec[k].dtype, name=k) for k in keys]

  def Call(*args):
    with context.Exporting():
      return fn(**serving.CheckedInputs(dict(zip(keys, args)), {k: s for k, s in zip(keys, signature)}))

  return tf.function(Call, input_signature=signature, autograph=False)


def _Logdirs(path):
  """The logdirs (folders with params.txt and train/) among `path` and its ancestors."""
  found, current = [], os.path.abspath(path)
  while True:
    if (os.path.isfile(os.path.join(current, checkpointer.PARAMS_FILE))
        and os.path.isdir(os.path.join(current, checkpointer.TRAIN_DIR))):
      found.append(current)
    parent = os.path.dirname(current)
    if parent == current:
      return found
    current = parent


_VARIABLES_FILE = re.compile(r'^variables\.(index|data-\d{5}-of-\d{5})$')


def _AssetFiles(export_dir):
  """The asset file names a SavedModel's saved_model.pb names, or None if it does not read."""
  proto = saved_model_pb2.SavedModel()
  try:
    with open(os.path.join(export_dir, 'saved_model.pb'), 'rb') as f:
      proto.ParseFromString(f.read())
  except (OSError, message.DecodeError):
    return None
  return {asset.filename for graph in proto.meta_graphs for asset in graph.asset_file_def}


def ExportWrote(export_dir):
  """A predicate (relative path, is_dir) -> whether an export writes that path into `export_dir`: the
  SavedModel's files (saved_model.pb, fingerprint.pb, variables/, the assets its graph names) and params.txt."""
  assets = _AssetFiles(export_dir) or set()

  def Wrote(relative, is_dir):
    parts = relative.split(os.sep)
    if len(parts) == 1:
      return parts[0] in ('variables', 'assets') if is_dir else parts[0] in _EXPORT_FILES
    if len(parts) == 2 and not is_dir:
      return (parts[0] == 'variables' and bool(_VARIABLES_FILE.match(parts[1]))) or (
          parts[0] == 'assets' and parts[1] in assets)
    return False

  return Wrote


_EXPORT_FILES = ('saved_model.pb', 'fingerprint.pb', checkpointer.PARAMS_FILE)


def _IsExport(path):
  return os.path.isfile(os.path.join(path, 'saved_model.pb'))


def CheckTarget(export_dir, model, flag='--export_dir'):
  """Raises a UserError unless `export_dir` may receive an export of `model`: missing, an empty folder, or an
  earlier lingpipe export of the same model that holds nothing else (replaced whole). No logdir, nothing in a
  logdir's checkpoints, the base folder of its exports and no path inside another export is used. Returns the
  real path to write (a symlink's target: the link stays)."""
  shown = '%s %s' % (flag, export_dir)
  if os.path.islink(export_dir) and not os.path.exists(export_dir):
    raise errors.FileSystemError('%s is a broken symlink (to %s); nothing was written. Give a folder, or a link to '
                                 'one.' % (shown, os.readlink(export_dir)))
  real = os.path.realpath(export_dir)
  for logdir in _Logdirs(real):
    train_dir = os.path.join(logdir, checkpointer.TRAIN_DIR)
    if real == logdir or real == train_dir or real.startswith(train_dir + os.sep):
      where = ('the logdir of a training run (its params.txt and checkpoints)' if real == logdir
               else 'inside the checkpoints of the logdir %s' % logdir)
      raise errors.ConfigError('%s is %s; nothing was written. Export elsewhere, e.g. to the default %s.' % (
          shown, where, os.path.join(logdir, EXPORT_DIR, '<step>')))
    if real == os.path.join(logdir, EXPORT_DIR):
      raise errors.ConfigError(
          '%s is the base folder of the logdir\'s exports (TF Serving\'s model base path), where each export is a '
          'version folder %s; nothing was written. Leave --export_dir out to export there, or give another '
          'folder.' % (shown, os.path.join(export_dir, '<step>')))
  above = os.path.dirname(real)
  while above != os.path.dirname(above):
    if _IsExport(above):
      raise errors.ConfigError('%s is inside the export %s; nothing was written. Give a folder outside it.' % (
          shown, above))
    above = os.path.dirname(above)
  if not os.path.lexists(real):
    return real
  if not os.path.isdir(real):
    raise errors.FileSystemError('%s is a file, not a folder; nothing was written. Give a missing or empty '
                                 'folder.' % shown)
  if os.path.ismount(real):  # Renaming a new export onto it fails (EBUSY).
    raise errors.FileSystemError(
        '%s is a mount point; nothing was written. An export is written beside its folder and renamed into place, '
        'which a mount point cannot take: give a folder inside it, e.g. %s.' % (shown, os.path.join(export_dir, '1')))
  try:
    entries = sorted(os.listdir(real))
  except OSError as e:
    raise errors.FileSystemError('Cannot read %s: %s.' % (shown, e.strerror)) from e
  if not entries:
    return real
  recorded = checkpointer.RecordedModel(real) if _IsExport(real) else None
  if recorded == model:
    replaceable.CheckOnlyOwn(real, ExportWrote(real), 'an earlier export of %s' % model, shown)
    return real
  what = ('an export of another model (%s)' % recorded if recorded
          else '%d entr%s (%s), not an earlier export of %s' % (
              len(entries), 'y' if len(entries) == 1 else 'ies', replaceable.Describe(entries), model))
  raise errors.ConfigError('%s holds %s; nothing was written or deleted. Give a missing or empty folder.' % (
      shown, what))


def Export(p, logdir, export_dir=None, checkpoint_path=None, out=None):
  """Writes the SavedModel (atomically: filled under a temporary name, then swapped into place) and returns its
  path. An earlier export of the same model there is replaced; anything else is refused (CheckTarget)."""
  if export_dir:
    CheckTarget(export_dir, p.model)  # Before the model is built: a refusal costs nothing.
  task, step, path = evaler.LoadTask(p, logdir, checkpoint_path, out=out)
  default = not export_dir
  if default:  # TF Serving's version folder: the step, known only now.
    export_dir = os.path.join(logdir, EXPORT_DIR, str(step))
  target = CheckTarget(export_dir, p.model, 'The export folder' if default else '--export_dir')
  module = tf.Module()
  module.task = task
  # Objects the signatures use beyond the task's variables (e.g. a tokenizer's tables and its model file).
  module.resources = list(task.InferenceResources())
  signatures = {}
  for name, (fn, spec) in task.Inference().items():
    if not spec:
      raise errors.ConfigError('Inference signature %r has no inputs.' % name)
    function = _SignatureFunction(fn, spec)
    setattr(module, name, function)
    signatures[name] = function.get_concrete_function()
  with safe_write.AtomicDirectory(target, 'SavedModel') as tmp:
    tf.saved_model.save(module, tmp, signatures=signatures)
    with open(os.path.join(tmp, checkpointer.PARAMS_FILE), 'w', encoding='utf-8') as f:
      f.write(p.ToText())  # Also what marks the folder as an export of this model (CheckTarget).
  where = '%s (the link\'s target %s)' % (export_dir, target) if os.path.islink(export_dir) else export_dir
  print('Exported %s at step %d (from %s) to %s with signatures: %s' % (
      p.model, step, path, where, ', '.join(sorted(signatures))), file=out, flush=True)
  if default:
    _LinkOldName(export_dir, step, out)
  return export_dir


def _LinkOldName(export_dir, step, out):
  """Makes `export/step_<N>`, where exports went before they took TF Serving's layout, a link to `export/<N>`, so
  scripts reading the old name keep working; TF Serving skips it (not an integer). Whatever else is there is left
  alone."""
  old = os.path.join(os.path.dirname(export_dir), 'step_%d' % step)
  if os.path.lexists(old):
    return
  tmp = temporaries.Name(old)
  try:
    os.symlink(os.path.basename(export_dir), tmp)
    os.rename(tmp, old)
  except OSError as e:
    if os.path.lexists(tmp):
      os.remove(tmp)
    print('(No link %s to the export: %s.)' % (old, e.strerror), file=out, flush=True)
