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


def CurrentStepSeed():
  """The step seed as an int64 scalar tensor (0 outside any StepSeed block)."""
  seed = _Stack('step_seed', None)[-1]
  return tf.constant(0, tf.int64) if seed is None else tf.cast(seed, tf.int64)
