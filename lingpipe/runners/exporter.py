"""Export: a SavedModel with one serving signature per entry of `Task.Inference()`.

The SavedModel holds the weights and the traced inference graphs only, so `tf.saved_model.load` alone serves it;
lingpipe need not be installed where it is used. By default it goes to `<logdir>/export/<step>/`: TF Serving serves
a model's base folder by its integer version subfolders (the highest by default), so `<logdir>/export` is that base.
"""

import os

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import serving
from lingpipe.runners import checkpointer
from lingpipe.runners import evaler
from lingpipe.runners import safe_write
from lingpipe.runners import temporaries


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


def CheckTarget(export_dir, model):
  """Raises a UserError unless `export_dir` may receive an export of `model`: missing, an empty folder, or an
  earlier lingpipe export of the same model (replaced whole). Nothing else is ever replaced, and no path in a
  logdir's checkpoints (or the logdir itself) is used."""
  real = os.path.realpath(export_dir)
  for logdir in _Logdirs(real):
    train_dir = os.path.join(logdir, checkpointer.TRAIN_DIR)
    if real == logdir or real == train_dir or real.startswith(train_dir + os.sep):
      where = ('the logdir of a training run (its params.txt and checkpoints)' if real == logdir
               else 'inside the checkpoints of the logdir %s' % logdir)
      raise errors.ConfigError('--export_dir %s is %s; nothing was written. Export elsewhere, e.g. to the default '
                               '%s.' % (export_dir, where, os.path.join(logdir, 'export', '<step>')))
  if not os.path.lexists(export_dir):
    return
  if not os.path.isdir(export_dir):
    raise errors.FileSystemError('--export_dir %s is a file, not a folder; nothing was written. Give a missing or '
                                 'empty folder.' % export_dir)
  try:
    entries = sorted(os.listdir(export_dir))
  except OSError as e:
    raise errors.FileSystemError('Cannot read --export_dir %s: %s.' % (export_dir, e.strerror)) from e
  if not entries:
    return
  recorded = checkpointer.RecordedModel(export_dir)
  if 'saved_model.pb' in entries and recorded == model:
    return
  what = ('an export of another model (%s)' % recorded if 'saved_model.pb' in entries and recorded
          else '%d entr%s (%s%s), not an earlier export of %s' % (
              len(entries), 'y' if len(entries) == 1 else 'ies', ', '.join(entries[:5]),
              ', ...' if len(entries) > 5 else '', model))
  raise errors.ConfigError('--export_dir %s holds %s; nothing was written or deleted. Give a missing or empty '
                           'folder.' % (export_dir, what))


def Export(p, logdir, export_dir=None, checkpoint_path=None, out=None):
  """Writes the SavedModel (atomically: filled under a temporary name, then swapped into place) and returns its
  path. An earlier export of the same model there is replaced; anything else is refused (CheckTarget)."""
  if export_dir:
    CheckTarget(export_dir, p.model)  # Before the model is built: a refusal costs nothing.
  task, step, path = evaler.LoadTask(p, logdir, checkpoint_path, out=out)
  default = not export_dir
  if default:  # TF Serving's version folder: the step, known only now.
    export_dir = os.path.join(logdir, 'export', str(step))
    CheckTarget(export_dir, p.model)
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
  with safe_write.AtomicDirectory(export_dir, 'SavedModel') as tmp:
    tf.saved_model.save(module, tmp, signatures=signatures)
    with open(os.path.join(tmp, checkpointer.PARAMS_FILE), 'w', encoding='utf-8') as f:
      f.write(p.ToText())  # Also what marks the folder as an export of this model (CheckTarget).
  print('Exported %s at step %d (from %s) to %s with signatures: %s' % (
      p.model, step, path, export_dir, ', '.join(sorted(signatures))), file=out, flush=True)
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
