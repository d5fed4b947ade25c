"""Weight initializers, described by Params and seeded so that runs are reproducible.

`WeightInit.Xavier(1.0)` etc. return small Params (method, scale) that live inside a layer's Params and so have a
text form; `WeightParams(shape, init, dtype)` describes one variable; `InitialValue(wp, seed)` computes its
starting value with stateless random ops, so the same seed and variable path always give the same weights.
"""

import math
import zlib

import numpy as np
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import hyperparams

METHODS = ('gaussian', 'uniform', 'xavier', 'he', 'constant', 'truncated_gaussian')


class WeightInit:
  """Constructors of initializer Params. Scale means: stddev (gaussian, truncated_gaussian), half-width
  (uniform), gain (xavier: uniform with limit scale*sqrt(6/(fan_in+fan_out)); he: normal with stddev
  scale*sqrt(2/fan_in)), or the value (constant)."""

  @staticmethod
  def _Make(method, scale):
    p = hyperparams.Params()
    p.Define('method', method, 'Initializer: one of %s.' % ', '.join(METHODS))
    p.Define('scale', float(scale), 'Stddev, half-width, gain or constant value, by method.')
    return p

  @staticmethod
  def Gaussian(scale=1.0):
    return WeightInit._Make('gaussian', scale)

  @staticmethod
  def Uniform(scale=1.0):
    return WeightInit._Make('uniform', scale)

  @staticmethod
  def Xavier(scale=1.0):
    return WeightInit._Make('xavier', scale)

  Glorot = Xavier

  @staticmethod
  def He(scale=1.0):
    return WeightInit._Make('he', scale)

  Kaiming = He

  @staticmethod
  def Constant(scale=0.0):
    return WeightInit._Make('constant', scale)

  @staticmethod
  def TruncatedGaussian(scale=1.0):
    return WeightInit._Make('truncated_gaussian', scale)


def WeightParams(shape, init=None, dtype=None, trainable=True):
  """Describes one variable: shape, initializer Params (None: the layer's params_init), dtype, trainable."""
  p = hyperparams.Params()
  p.Define('shape', [int(d) for d in shape], 'Shape of the variable.')
  p.Define('init', init, 'WeightInit Params; None takes the layer\'s params_init.')
  p.Define('dtype', dtype, 'dtype; None takes the layer\'s dtype.')
  p.Define('trainable', trainable, 'Whether the optimizer updates it.')
  return p


def Fans(shape):
  """(fan_in, fan_out) of a weight shape: [..., in, out], receptive field = product of the leading dims."""
  if not shape:
    return 1, 1
  if len(shape) == 1:
    return shape[0], shape[0]
  receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
  return shape[-2] * receptive, shape[-1] * receptive


def VariableSeed(layer_seed, path):
  """A stateless-op seed pair from the layer's seed and the variable's path (stable across runs)."""
  return tf.constant([int(layer_seed) & 0x7FFFFFFF, zlib.crc32(path.encode('utf-8')) & 0x7FFFFFFF],
                     dtype=tf.int64)


def InitialValue(wp, seed):
  """The initial value of WeightParams `wp` (with init and dtype resolved) for a stateless `seed` pair."""
  method, scale = wp.init.method, wp.init.scale
  shape, dtype = wp.shape, wp.dtype
  fan_in, fan_out = Fans(shape)
  if method == 'gaussian':
    return tf.random.stateless_normal(shape, seed, stddev=scale, dtype=dtype)
  if method == 'truncated_gaussian':
    return tf.random.stateless_truncated_normal(shape, seed, stddev=scale, dtype=dtype)
  if method == 'uniform':
    return tf.random.stateless_uniform(shape, seed, minval=-scale, maxval=scale, dtype=dtype)
  if method == 'xavier':
    limit = scale * math.sqrt(6.0 / (fan_in + fan_out))
    return tf.random.stateless_uniform(shape, seed, minval=-limit, maxval=limit, dtype=dtype)
  if method == 'he':
    return tf.random.stateless_normal(shape, seed, stddev=scale * math.sqrt(2.0 / fan_in), dtype=dtype)
  if method == 'constant':
    return tf.fill(shape, tf.cast(scale, dtype))
  raise errors.ConfigError('Unknown initializer method %r; expected one of %s.%s' % (
      method, ', '.join(METHODS), errors.DidYouMean(method, METHODS)))
