"""Learning-rate schedules: a multiplier of task.train.learning_rate as a function of the global step."""

import math

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.core import param_checks


class BaseSchedule:
  """`Value(step)` returns a float32 scalar tensor; the effective rate is learning_rate * Value(step)."""

  @classmethod
  def Params(cls):
    return hyperparams.InstantiableParams(cls)

  def __init__(self, params):
    self.params = params.Copy().Freeze()

  def Value(self, step):
    raise NotImplementedError


class Constant(BaseSchedule):
  """Always `value`."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('value', 1.0, 'The multiplier.')
    return p

  def Value(self, step):
    return tf.constant(self.params.value, tf.float32)


class TransformerSchedule(BaseSchedule):
  """Linear warm-up then inverse-square-root decay (Vaswani et al. 2017):
  model_dim^-0.5 * min(step * warmup^-1.5, step^-0.5), with step counted from 1."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 4000, 'Steps of linear warm-up.', check=param_checks.Int(0))
    p.Define('model_dim', 512, 'Model depth; the peak rate scales as model_dim^-0.5.',
             check=param_checks.Int(1))
    return p

  def __init__(self, params):
    super().__init__(params)
    if self.params.warmup_steps <= 0 or self.params.model_dim <= 0:
      raise errors.ConfigError('TransformerSchedule needs warmup_steps > 0 and model_dim > 0.')

  def Value(self, step):
    p = self.params
    s = tf.cast(step, tf.float32) + 1.0
    return p.model_dim ** -0.5 * tf.minimum(s * p.warmup_steps ** -1.5, tf.math.rsqrt(s))


class CosineSchedule(BaseSchedule):
  """Linear warm-up to 1, then a half cosine from 1 down to min_ratio at total_steps."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 0, 'Steps of linear warm-up.', check=param_checks.Int(0))
    p.Define('total_steps', 10000, 'Step at which the cosine reaches min_ratio.', check=param_checks.Int(1))
    p.Define('min_ratio', 0.0, 'Final multiplier.', check=param_checks.Float(0))
    return p

  def __init__(self, params):
    super().__init__(params)
    if self.params.total_steps <= self.params.warmup_steps:
      raise errors.ConfigError('CosineSchedule: total_steps (%d) must exceed warmup_steps (%d).' % (
          self.params.total_steps, self.params.warmup_steps))

  def Value(self, step):
    p = self.params
    s = tf.cast(step, tf.float32)
    warm = (s + 1.0) / p.warmup_steps if p.warmup_steps else tf.constant(1.0)
    progress = tf.clip_by_value((s - p.warmup_steps) / float(p.total_steps - p.warmup_steps), 0.0, 1.0)
    cosine = p.min_ratio + (1.0 - p.min_ratio) * 0.5 * (1.0 + tf.cos(math.pi * progress))
    return tf.where(s < p.warmup_steps, warm, cosine)


class ExponentialSchedule(BaseSchedule):
  """decay_rate ** (step // decay_steps) (without the floor when not staircase), never below min_ratio, and a linear
  warm-up to it over the first warmup_steps: the reference AmoebaNet's and Inception's schedule."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('warmup_steps', 0, 'Steps of linear warm-up.', check=param_checks.Int(0))
    p.Define('decay_steps', 1000, 'Steps per decay.', check=param_checks.Int(1))
    p.Define('decay_rate', 0.97, 'Multiplier per decay_steps.', check=param_checks.Float(0.0, 1.0, low_open=True))
    p.Define('staircase', True, 'Decay in whole steps of decay_steps.')
    p.Define('min_ratio', 0.0, 'Lowest multiplier.', check=param_checks.Float(0))
    return p

  def Value(self, step):
    p = self.params
    s = tf.cast(step, tf.float32)
    warm = (s + 1.0) / p.warmup_steps if p.warmup_steps else tf.constant(1.0)
    periods = s / p.decay_steps
    decayed = tf.maximum(p.decay_rate ** (tf.floor(periods) if p.staircase else periods), p.min_ratio)
    return tf.where(s < p.warmup_steps, warm, decayed)


class PiecewiseConstant(BaseSchedule):
  """values[i] for boundaries[i-1] <= step < boundaries[i]."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('boundaries', [], 'Increasing step boundaries.')
    p.Define('values', [1.0], 'One more value than boundaries.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if len(p.values) != len(p.boundaries) + 1:
      raise errors.ConfigError('PiecewiseConstant: %d boundaries need %d values, got %d.' % (
          len(p.boundaries), len(p.boundaries) + 1, len(p.values)))
    if list(p.boundaries) != sorted(p.boundaries):
      raise errors.ConfigError('PiecewiseConstant: boundaries must increase, got %r.' % (p.boundaries,))

  def Value(self, step):
    p = self.params
    index = tf.searchsorted(tf.constant(p.boundaries or [0], tf.int64), tf.reshape(tf.cast(step, tf.int64), [1]),
                            side='right')[0] if p.boundaries else 0
    return tf.gather(tf.constant(p.values, tf.float32), index)
