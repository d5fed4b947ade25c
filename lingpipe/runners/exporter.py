"""Export: a SavedModel with one serving signature per entry of `Task.Inference()`.

The SavedModel holds the weights and the traced inference graphs only, so `tf.saved_model.load` alone serves it;
lingpipe need not be installed where it is used.
"""

import os

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import serving
from lingpipe.runners import evaler
from lingpipe.runners import safe_write


def _SignatureFunction(fn, spec):
  """A tf.function of positional tensors named after the spec's keys, calling fn(**named) on the inputs once they
  pass their shape checks (serving.CheckedInputs)."""
  keys = list(spec.keys())
  signature = [tf.TensorSpec(spec[k].shape, spec[k].dtype, name=k) for k in keys]

  def Call(*args):
    with context.Exporting():
      return fn(**serving.CheckedInputs(dict(zip(keys, args)), {k: s for k, s in zip(keys, signature)}))

  return tf.function(Call, input_signature=signature, autograph=False)


def Export(p, logdir, export_dir=None, checkpoint_path=None, out=None):
  """Writes the SavedModel (atomically: to a temporary folder, then renamed) and returns its path."""
  task, step, path = evaler.LoadTask(p, logdir, checkpoint_path)
  export_dir = export_dir or os.path.join(logdir, 'export', 'step_%d' % step)
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
    with open(os.path.join(tmp, 'params.txt'), 'w') as f:
      f.write(p.ToText())
  print('Exported %s at step %d (from %s) to %s with signatures: %s' % (
      p.model, step, path, export_dir, ', '.join(sorted(signatures))), file=out, flush=True)
  return export_dir
