"""Evaluation: the task's metrics over an eval set at a checkpoint, written as JSON and summaries."""

import json
import os

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.distributed import cluster
from lingpipe.runners import batch_function
from lingpipe.runners import divergence
from lingpipe.logdir import checkpointer
from lingpipe.logdir import safe_write
from lingpipe.logdir import set_aside
from lingpipe.logdir import shared_logdir


def ResolveCheckpoint(logdir, checkpoint_path, what='--checkpoint_path'):
  """`checkpoint_path` if given (a folder: its newest checkpoint, its logdir's, or an export's variables), else
  the latest in logdir/train; raises CheckpointError if there is none."""
  if checkpoint_path and os.path.isdir(checkpoint_path):
    if os.path.isfile(os.path.join(checkpoint_path, 'saved_model.pb')):  # An export: its variables.
      return os.path.join(checkpoint_path, 'variables', 'variables')
    if os.path.isdir(os.path.join(checkpoint_path, checkpointer.TRAIN_DIR)):  # A logdir.
      checkpoint_path = os.path.join(checkpoint_path, checkpointer.TRAIN_DIR)
    complete, notes = checkpointer.Candidates(checkpoint_path)
    if not complete:
      raise errors.CheckpointError('%s %s is a folder with no complete checkpoint%s; pass a checkpoint prefix '
                                   '(<logdir>/train/ckpt-N).' % (
                                       what, checkpoint_path, ' (%s)' % '; '.join(notes) if notes else ''))
    return complete[0]
  if checkpoint_path:
    return checkpoint_path
  train_dir = os.path.join(logdir, checkpointer.TRAIN_DIR)
  complete, notes = checkpointer.Candidates(train_dir)
  if not complete:
    raise errors.CheckpointError('No complete checkpoint in %s%s: train first (--mode=train) or pass '
                                 '--checkpoint_path.' % (train_dir, ' (%s)' % '; '.join(notes) if notes else ''))
  return complete[0]


_ROTATION_RETRIES = 5


def ExportOf(path):
  """The export folder whose variables checkpoint `path` is (<export>/variables/variables), or None."""
  variables = os.path.dirname(os.path.abspath(path))
  export = os.path.dirname(variables)
  if (os.path.basename(path) == 'variables' and os.path.basename(variables) == 'variables'
      and os.path.isfile(os.path.join(export, 'saved_model.pb'))):
    return export
  return None


def LoadTask(p, logdir, checkpoint_path=None, out=None):
  """(task, global step, checkpoint path): the task built from `p` with the weights of a checkpoint, which must
  hold exactly the task's variables (checkpointer.CheckTaskVariables). Without `checkpoint_path`, the newest; if
  a training run rotates it away while it is read, the newest again (a few times, each said on `out`)."""
  for attempt in range(_ROTATION_RETRIES + 1):
    path = ResolveCheckpoint(logdir, checkpoint_path)
    if attempt == 0 and cluster.Current().is_remote:  # Each worker restores its own variables from there.
      shared_logdir.Check(cluster.Current(), os.path.dirname(os.path.abspath(path)), path + '.index')
    # A new task each time: a failed restore leaves TensorFlow's deferred restorations on the old one's objects.
    with cluster.Current().Placement():
      task = p.task.Instantiate()
    step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
    export = ExportOf(path)
    # An export's variables hold the task without a step: its version folder is the step it was exported at.
    root = tf.train.Checkpoint(task=task) if export else tf.train.Checkpoint(step=step, task=task)
    if export and os.path.basename(export).isdigit():
      step.assign(int(os.path.basename(export)))
    note = divergence.SetAsideNote(path)
    if note:
      raise errors.CheckpointError(note)
    try:
      checkpointer.Restore(root, path, exact_task=True)
      divergence.CheckFinite(task.variables, 'Checkpoint %s' % path, 'its weights diverged; pass an earlier '
                             'checkpoint with --checkpoint_path.')
      return task, int(step.numpy()), path
    except (checkpointer.VanishedCheckpointError, checkpointer.MissingCheckpointError):
      # Chosen from the disk a moment ago: a training run rotated it away since.
      if checkpoint_path or attempt == _ROTATION_RETRIES:
        raise
    except checkpointer.CorruptCheckpointError as e:
      # Complete when it was chosen; if files are missing now, training rotated it away meanwhile.
      if checkpoint_path or attempt == _ROTATION_RETRIES or not checkpointer.Incomplete(path):
        raise checkpointer.CorruptCheckpointError('%s %s' % (e, _Alternative(root, path))) from e
    print('%s was rotated away by training while it was read; using the newest checkpoint again.' % path,
          file=out, flush=True)
  raise AssertionError('unreachable')


def _Alternative(root, corrupt):
  """Advice for a corrupt checkpoint: the newest other checkpoint beside it that restores into `root`."""
  directory = os.path.dirname(corrupt)
  for prefix in checkpointer.Candidates(directory)[0]:
    if os.path.abspath(prefix) == os.path.abspath(corrupt):
      continue
    try:
      checkpointer.Restore(root, prefix, exact_task=True)
    except errors.CheckpointError:
      continue
    return ('The newest checkpoint that restores is %s: pass --checkpoint_path=%s to use it (rerunning training '
            'moves the damaged files to %s and resumes from it).' % (
                os.path.basename(prefix), prefix, os.path.join(directory, set_aside.CORRUPT_DIR)))
  return 'No other checkpoint in %s restores.' % directory


def Placed(fn):
  """fn, run under the current cluster's placement (on a remote cluster: on the workers, not the trainer)."""

  def Run(*args):
    with cluster.Current().Placement():
      return fn(*args)

  return Run


def WriteResults(directory, result, summary_prefix):
  """Writes result (a dict with step and metrics) as <directory>/metrics-<step>.json and metrics.json, and the
  metrics as TensorBoard scalars <summary_prefix>/<name>; returns the path of metrics-<step>.json."""
  step = result['step']
  text = json.dumps(result, indent=2, sort_keys=True)
  path = os.path.join(directory, 'metrics-%d.json' % step)
  safe_write.AtomicWrite(path, text, 'metrics')
  safe_write.AtomicWrite(os.path.join(directory, 'metrics.json'), text, 'metrics')
  with tf.summary.create_file_writer(directory).as_default(step=step):
    for name, value in result['metrics'].items():
      tf.summary.scalar('%s/%s' % (summary_prefix, name), value)
  return path


def Evaluate(p, logdir, checkpoint_path=None, out=None):
  """Evaluates and returns {metric: value}; writes logdir/eval_<dataset>/metrics-<step>.json and summaries."""
  if p.input.repeat and not p.task.eval.max_batches:
    raise errors.ConfigError('The %s input repeats forever (input.repeat=True); set input.repeat=False or '
                             'task.eval.max_batches.' % p.dataset)
  task, step, path = LoadTask(p, logdir, checkpoint_path, out=out)
  dataset = p.input.Instantiate().GetDataset()
  eval_fn = batch_function.BatchFunction(Placed(task.ComputeMetrics), dataset.element_spec)
  sums, weights, batches = {}, {}, 0
  for batch in dataset:
    for name, (value, weight) in eval_fn(batch).items():
      w = float(weight)
      sums[name] = sums.get(name, 0.0) + float(value) * w
      weights[name] = weights.get(name, 0.0) + w
    batches += 1
    if p.task.eval.max_batches and batches >= p.task.eval.max_batches:
      break
  if not batches:
    raise errors.DataError('The %s input produced no batch (batch_size %d larger than the set, with '
                           'drop_remainder?).' % (p.dataset, p.input.batch_size))
  metrics = {name: sums[name] / max(weights[name], 1e-12) for name in sums}
  metrics['num_examples'] = weights.get('loss', 0.0)
  bad = divergence.NonFiniteMetrics(metrics)
  if bad:  # Nothing is written: a metrics file of NaN would read as a result.
    raise errors.NonFiniteLossError(
        'Eval of %s at step %d (%s) on %s: %s not finite; nothing was written. The checkpoint\'s weights give a '
        'non-finite loss (they diverged): evaluate an earlier one with --checkpoint_path.' % (
            p.model, step, path, p.dataset, ', '.join('%s=%s' % (k, metrics[k]) for k in bad) + (
                ' is' if len(bad) == 1 else ' are')))
  print('Eval of %s at step %d on %s (%d batches): %s' % (p.model, step, p.dataset, batches, ' '.join(
      '%s=%.4f' % kv for kv in sorted(metrics.items()))), file=out, flush=True)  # Before writing: never lost.
  eval_dir = os.path.join(logdir, 'eval_%s' % p.dataset.lower())
  written = WriteResults(eval_dir, dict(model=p.model, dataset=p.dataset, checkpoint=path, step=step,
                                        metrics=metrics), 'metrics')
  print('Wrote %s' % written, file=out, flush=True)
  return metrics
