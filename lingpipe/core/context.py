"""The context of a forward pass: training or evaluation, the per-step seed, the micro-batch, export mode.

Layers read it instead of taking `training=` arguments everywhere. It is consulted while a `tf.function` is
traced, so the trainer traces separate functions for training and evaluation:

    with context.Training(True), context.StepSeed(step):
      loss = task.ComputeLoss(batch)
"""

import contextlib
import threading
import zlib

import tensorflow as tf

from lingpipe.core import errors

_STATE = threading.local()
# Each entry: a stack of values, innermost last, with its value outside any block.
_DEFAULTS = {'training': False, 'step_seed': None, 'micro_batch': None, 'bn_stats': None, 'exporting': False,
             'replica': 0, 'real_rows': None, 'layer_seeds': None}


def _Current(name):
  return getattr(_STATE, name, [_DEFAULTS[name]])[-1]


@contextlib.contextmanager
def _Push(name, value):
  if not hasattr(_STATE, name):
    setattr(_STATE, name, [_DEFAULTS[name]])
  stack = getattr(_STATE, name)
  stack.append(value)
  try:
    yield value
  finally:
    stack.pop()


def Training(is_training):
  """Within this block, layers behave as in training (dropout on, batch norm on batch statistics)."""
  return _Push('training', bool(is_training))


def TrainingOrAmbient(training):
  """A `context.Training(training)` block, or nothing when `training` is None (the ambient mode holds)."""
  if training is None:
    return contextlib.nullcontext()
  if not isinstance(training, bool):
    raise errors.ConfigError('training=%r: expected True, False or None (the ambient context.Training).' % (
        training,))
  return Training(training)


def IsTraining():
  return _Current('training')


def StepSeed(seed):
  """Within this block, seeded randomness (deterministic dropout) uses `seed` (e.g. the global step)."""
  return _Push('step_seed', seed)


def StepSeedValue():
  """The value given to the innermost StepSeed block (None outside any), to re-enter it later with StepSeed."""
  return _Current('step_seed')


def MicroBatch(index):
  """Within this block, the computation is for micro-batch `index` (an int or int tensor) of a pipeline."""
  return _Push('micro_batch', index)


def CurrentMicroBatch():
  """The index given to the innermost MicroBatch block (an int or int tensor), or None outside any."""
  return _Current('micro_batch')


def LayerSeeds(seeds):
  """Within this block, the layers whose path `seeds` ({path: int64 scalar}) names draw their random masks from
  that seed instead of their own (LayerSeed): a layer traced once for several layers of its kind
  (gpipe/engine/layer_functions.py) draws each one's masks."""
  return _Push('layer_seeds', seeds)


def StaticLayerSeed(layer):
  """`layer`'s own seed of its random masks, from its random_seed and path."""
  return (layer.params.random_seed * 1000003 + zlib.crc32(layer.path.encode('utf-8'))) & 0x7FFFFFFF


def LayerSeed(layer):
  """StaticLayerSeed as an int64 scalar, or the one LayerSeeds gives `layer` (traced for another layer)."""
  seeds = _Current('layer_seeds')
  given = None if seeds is None else seeds.get(layer.path)
  return given if given is not None else tf.constant(StaticLayerSeed(layer), tf.int64)


def CurrentStepSeed():
  """An int64 scalar seed from the step seed, the micro-batch index and the replica (0, 0, 0 outside such blocks).

  Micro-batch 0 of replica 0 gets the step seed's own stream, so a pipeline with one micro-batch draws exactly
  what the plain model draws; other micro-batches and other data-parallel replicas draw their own masks.
  """
  seed = _Current('step_seed')
  seed = tf.constant(0, tf.int64) if seed is None else tf.cast(seed, tf.int64)
  micro_batch, replica = _Current('micro_batch'), _Current('replica')
  if micro_batch is None and not replica:
    return seed
  index = tf.constant(0, tf.int64) if micro_batch is None else tf.cast(micro_batch, tf.int64)
  index += replica * 2**16  # Up to 65536 micro-batches per replica.
  return seed + index * (2**32)  # Distinct from every step seed below 2^32.


def Replica(index):
  """Within this block, the computation is data-parallel replica `index` (a Python int) of the cluster."""
  return _Push('replica', int(index))


def CurrentReplica():
  return _Current('replica')


def RealRows(batch_dim, count):
  """Within this block, only the first `count` (an int tensor) rows along `batch_dim` of the batch are real; the
  rest are padding (a pipeline with pad=True), which batch statistics must leave out."""
  return _Push('real_rows', (batch_dim, count))


def CurrentRealRows():
  """(batch_dim, count) of the innermost RealRows block, or None when every row is real."""
  return _Current('real_rows')


class BatchNormStats:
  """Collects batch-norm moments instead of updating moving averages, so that they move once per step.

  A pipeline hands over the moments of all its micro-batches, and the task (BaseTask.ComputeGradients) collects
  those of every layer and replica; `Update()` then moves each layer's averages once, by the mean and variance of
  all parts together (moments.Moments merge by adding): what the plain model computes from the whole mini-batch.
  With discard=True the moments are dropped: used while re-computing a forward pass in the backward.
  """

  def __init__(self, discard=False):
    self.discard = discard
    self.moments = {}  # layer path -> (layer, moments.Moments of every part so far, merged)

  def Add(self, layer, part):
    """Adds `part` (a moments.Moments) to `layer`'s."""
    if self.discard:
      return
    if layer.path in self.moments:
      part = self.moments[layer.path][1].Merge(part)
    self.moments[layer.path] = (layer, part)

  def Update(self):
    """Moves each layer's moving averages once, by its merged moments; returns the update ops."""
    updates = []
    for layer, merged in self.moments.values():
      with tf.device(layer.moving_mean.device):
        updates.append(layer.UpdateMovingStats(merged.Mean(), merged.Variance()))
    return updates


def CollectBatchNormStats(collector):
  """Within this block, batch norm layers in training hand their moments to `collector`."""
  return _Push('bn_stats', collector)


def CurrentBatchNormStats():
  """The active BatchNormStats collector, or None (batch norm then updates its moving averages itself)."""
  return _Current('bn_stats')


def Snapshot():
  """Every block's current value, to re-enter later (Restored): a backward built outside its forward's blocks
  re-computes the forward as it ran (same branch, seeds, micro-batch and rows)."""
  return {name: _Current(name) for name in _DEFAULTS}


@contextlib.contextmanager
def Restored(snapshot, **replaced):
  """Within this block, the values of `snapshot` (Snapshot), with those `replaced` (e.g. bn_stats=...)."""
  with contextlib.ExitStack() as stack:
    for name, value in dict(snapshot, **replaced).items():
      stack.enter_context(_Push(name, value))
    yield


def Exporting():
  """Within this block, layers build a single-device inference graph (a pipeline runs its layers in order)."""
  return _Push('exporting', True)


def IsExporting():
  return _Current('exporting')
