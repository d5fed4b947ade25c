"""Decoding: the task's Decode() over a whole dataset at a checkpoint, its post-processing (e.g. BLEU), and the
outputs written as text files, a JSON of metrics and TensorBoard summaries."""

import json
import os

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.runners import batch_function
from lingpipe.runners import evaler
from lingpipe.logdir import replaceable
from lingpipe.logdir import safe_write

METRICS_FILE = 'metrics.json'


def _DecodeWrote(step_dir):
  """A predicate (relative path, is_dir) -> whether a decode writes that path into `step_dir`: metrics.json and
  the files it lists (the hypotheses; *.hyp for a decode that did not list them)."""
  try:
    with open(os.path.join(step_dir, METRICS_FILE), encoding='utf-8') as f:
      listed = json.load(f).get('files')
  except (OSError, ValueError, AttributeError):
    listed = None

  def Wrote(relative, is_dir):
    if is_dir:
      return False
    if relative == METRICS_FILE:
      return True
    return relative in listed if isinstance(listed, list) else os.sep not in relative and relative.endswith('.hyp')

  return Wrote


def CheckStepDir(step_dir):
  """Raises a ConfigError unless `step_dir` is missing, empty or an earlier decode holding nothing else."""
  if os.path.isdir(step_dir) and os.listdir(step_dir):
    replaceable.CheckOnlyOwn(step_dir, _DecodeWrote(step_dir), 'an earlier decode')
  elif os.path.lexists(step_dir) and not os.path.isdir(step_dir):
    raise errors.FileSystemError('%s is a file, where the decode\'s folder goes; nothing was written. Move it '
                                 'aside.' % step_dir)


def Decode(p, logdir, checkpoint_path=None, out=None):
  """Decodes p.input once; writes logdir/decode_<dataset>/ (files, metrics-<step>.json); returns the metrics."""
  if p.input.repeat:
    raise errors.ConfigError('The %s input repeats forever (input.repeat=True); decoding needs one pass: set '
                             'input.repeat=False.' % p.dataset)
  p.task.cls.CheckDecodeInput(p.task, p.input)
  task, step, path = evaler.LoadTask(p, logdir, checkpoint_path, out=out)
  if not hasattr(task, 'Decode') or not hasattr(task, 'PostProcessDecode'):
    raise errors.ConfigError('Model %s (task %s) does not decode: it has no Decode()/PostProcessDecode().' % (
        p.model, type(task).__name__))
  inp = p.input.Instantiate()
  dataset = inp.GetDataset()
  decode_fn = batch_function.BatchFunction(evaler.Placed(task.Decode), dataset.element_spec)
  decoded = [tf.nest.map_structure(lambda t: t.numpy(), dict(decode_fn(batch))) for batch in dataset]
  if not decoded:
    raise errors.DataError('The %s input produced no batch to decode.' % p.dataset)
  metrics, files, signature = task.PostProcessDecode(decoded, inp)
  print('Decode of %s at step %d on %s: %s' % (p.model, step, p.dataset, ' '.join(
      '%s=%.2f' % kv for kv in sorted(metrics.items()))), file=out, flush=True)  # Before writing: never lost.
  if signature:
    print('Signature: %s' % signature, file=out, flush=True)
  decode_dir = os.path.join(logdir, 'decode_%s' % p.dataset.lower())
  result = dict(model=p.model, dataset=p.dataset, checkpoint=path, step=step, metrics=metrics, signature=signature,
                files=sorted(files))
  # The hypotheses and their metrics, as one folder that replaces an earlier decode's whole.
  step_dir = os.path.join(decode_dir, 'step_%d' % step)
  CheckStepDir(step_dir)
  with safe_write.AtomicDirectory(step_dir, 'decode output') as tmp:
    for name, text in files.items():
      with open(os.path.join(tmp, name), 'w', encoding='utf-8') as f:
        f.write(text)
    with open(os.path.join(tmp, METRICS_FILE), 'w', encoding='utf-8') as f:
      f.write(json.dumps(result, indent=2, sort_keys=True))
  written = evaler.WriteResults(decode_dir, result, 'decode')
  print('Wrote %s and hypotheses in %s' % (written, step_dir), file=out, flush=True)
  return metrics
