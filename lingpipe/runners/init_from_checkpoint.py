"""Fine-tuning: initialize a fresh run's variables from another run's checkpoint, by (mapped) variable name.

The source run is rebuilt from its logdir's params.txt (so it may be a different registered model, e.g. one with
another number of classes), its checkpoint restored, and each of our variables copied from the source variable of
the same name relative to the task (`network/sub_3/w`), after the first matching rewrite rule. Variables matched
by an exclude pattern keep their fresh initialization: a new classifier head. Anything else that does not line up
(no such source variable, another shape) is an error naming the variables, so nothing is silently left random.
"""

import os
import re

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.distributed import cluster
from lingpipe.model import model_registry
from lingpipe.logdir import checkpointer
from lingpipe.runners import evaler


def RelativeName(variable):
  """'task/network/sub_0/w:0' -> 'network/sub_0/w' (independent of the task's name)."""
  name = variable.name.split(':')[0]
  return name.split('/', 1)[1] if '/' in name else name


def SourceParams(checkpoint_path):
  """The params of the run that wrote `checkpoint_path` (<logdir>/train/ckpt-N, or an export's variables), rebuilt
  from its logdir (or the export's params.txt)."""
  if not checkpointer.CheckpointFiles(checkpoint_path):
    raise errors.CheckpointError('init_from_checkpoint %s: there is no checkpoint there (no files %s.*); give a '
                                 'checkpoint of a lingpipe run (<logdir>/train/ckpt-N), its logdir or an export.' % (
                                     checkpoint_path, os.path.basename(checkpoint_path)))
  logdir = evaler.ExportOf(checkpoint_path) or os.path.dirname(os.path.dirname(os.path.abspath(checkpoint_path)))
  model = checkpointer.RecordedModel(logdir)
  if model is None:
    raise errors.CheckpointError('init_from_checkpoint %s: no %s in %s to rebuild the source model from; give '
                                 'a checkpoint of a lingpipe run (<logdir>/train/ckpt-N).' % (
                                     checkpoint_path, checkpointer.PARAMS_FILE, logdir))
  p = model_registry.GetParams(model, 'Train')
  p.FromText(checkpointer.RecordedParamsText(logdir))
  return p


def _SourceTask(checkpoint_path):
  """The source run's task with the checkpoint's weights, built as one replica of its own pipelines (which may have
  another number of splits than ours) on this run's own devices, wrapping where it has fewer: local devices, or the
  workers' on a cluster (the values are only read, so where its cells sit does not matter)."""
  p = SourceParams(checkpoint_path)
  current = cluster.Current()
  slots = [device for row in current.devices for device in row]
  num_splits = max(1, cluster.MaxNumSplits(p))
  mesh = cluster.Cluster([[slots[k % len(slots)] for k in range(num_splits)]], remote_job=current.remote_job)
  with cluster.Use(mesh) as source_cluster:
    with source_cluster.Placement():
      task = p.task.Instantiate()
  checkpointer.Restore(tf.train.Checkpoint(task=task), checkpoint_path, exact_task=True)
  return task, p.model


def InitFromCheckpoint(task, checkpoint_path, rules=(), exclude=()):
  """Assigns `task`'s variables from the checkpoint (a folder: its newest, as --checkpoint_path takes one); returns
  a one-line summary."""
  checkpoint_path = evaler.ResolveCheckpoint(None, checkpoint_path, 'init_from_checkpoint')
  source, model = _SourceTask(checkpoint_path)
  by_name = {RelativeName(v): v for v in source.variables}
  copies, fresh, problems = [], [], []
  for var in task.variables:
    name = RelativeName(var)
    if any(re.search(pattern, name) for pattern in exclude):
      fresh.append(name)
      continue
    source_name = name
    for pattern, replacement in rules:
      if re.search(pattern, name):
        source_name = re.sub(pattern, replacement, name)
        break
    src = by_name.get(source_name)
    if src is None:
      problems.append('%s (no source variable %s)' % (name, source_name))
    elif src.shape != var.shape:
      problems.append('%s %s (source %s is %s)' % (name, var.shape.as_list(), source_name, src.shape.as_list()))
    else:
      copies.append((var, src))
  if problems:
    raise errors.CheckpointError(
        'init_from_checkpoint %s (model %s) does not provide %d variable(s): %s. Map names with '
        'task.train.init_from_checkpoint_rules or keep them fresh with task.train.init_from_checkpoint_exclude '
        '(e.g. a new softmax head).' % (checkpoint_path, model, len(problems), '; '.join(problems[:5]) + (
            '; ...' if len(problems) > 5 else '')))
  for var, src in copies:
    var.assign(tf.cast(src, var.dtype))
  count = sum(var.shape.num_elements() for var, _ in copies)
  return 'Initialized %d variables (%d values) from %s (model %s); fresh: %s.' % (
      len(copies), count, checkpoint_path, model, ', '.join(fresh) or 'none')
