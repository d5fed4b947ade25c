"""The context of a forward pass: training or evaluation, and the per-step seed for randomness.

Layers read it instead of taking `training=` arguments everywhere. It is consulted while a `tf.function` is
traced, so the trainer traces separate functions for training and evaluation:

    with context.Training(True), context.StepSeed(step):
      loss = task.ComputeLoss(batch)
"""

import contextlib
import threading

import tensorflow as tf

_STATE = threading.local()


def _Stack(name, default):
  if not hasattr(_STATE, name):
    setattr(_STATE, name, [default])
  return getattr(_STATE, name)


@contextlib.contextmanager
def Training(is_training):
  """Within this block, layers behave as in training (dropout on, batch norm on batch statistics)."""
  stack = _Stack('training', False)
  stack.append(bool(is_training))
  try:
    yield
  finally:
    stack.pop()


def IsTraining():
  return _Stack('training', False)[-1]


@contextlib.contextmanager
def StepSeed(seed):
  """Within this block, seeded randomness (deterministic dropout) uses `seed` (e.g. the global step)."""
  stack = _Stack('step_seed', None)
  stack.append(seed)
  try:
    yield
  finally:
    stack.pop()


def StepSeedValue():
  """The value given to the innermost StepSeed block (None outside any), to re-enter it later with StepSeed."""
  return _Stack('step_seed', None)[-1]


@contextlib.contextmanager
def MicroBatch(index):
  """Within this block, the computation is for micro-batch `index` (an int or int tensor) of a pipeline."""
  stack = _Stack('micro_batch', None)
  stack.append(index)
  try:
    yield
  finally:
    stack.pop()


def CurrentStepSeed():
  """An int64 scalar seed from the step seed and the micro-batch index (0 and 0 outside such blocks).

  Micro-batch 0 gets the step seed's own stream, so a pipeline with one micro-batch draws exactly what the plain
  model draws; other micro-batches draw their own masks.
  """
  seed = _Stack('step_seed', None)[-1]
  seed = tf.constant(0, tf.int64) if seed is None else tf.cast(seed, tf.int64)
  micro_batch = _Stack('micro_batch', None)[-1]
  if micro_batch is None:
    return seed
  return seed + tf.cast(micro_batch, tf.int64) * (2**32)  # Distinct from every step seed below 2^32.


class BatchNormStats:
  """Collects batch-norm moments instead of updating moving averages (the pipeline updates them once per step).

  With discard=True the moments are dropped: used while re-computing a forward pass in the backward.
  """

  def __init__(self, discard=False):
    self.discard = discard
    self.moments = {}  # layer path -> (layer, mean, variance)

  def Add(self, layer, mean, variance):
    if not self.discard:
      self.moments[layer.path] = (layer, mean, variance)


@contextlib.contextmanager
def CollectBatchNormStats(collector):
  stack = _Stack('bn_stats', None)
  stack.append(collector)
  try:
    yield collector
  finally:
    stack.pop()


def CurrentBatchNormStats():
  """The active BatchNormStats collector, or None (batch norm then updates its moving averages itself)."""
  return _Stack('bn_stats', None)[-1]


@contextlib.contextmanager
def Exporting():
  """Within this block, layers build a single-device inference graph (a pipeline runs its layers in order)."""
  stack = _Stack('exporting', False)
  stack.append(True)
  try:
    yield
  finally:
    stack.pop()


def IsExporting():
  return _Stack('exporting', False)[-1]
