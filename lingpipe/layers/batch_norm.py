"""Batch normalization with moving statistics for evaluation, computed in the variables' dtype (float32)
whatever the compute dtype: statistics and moving averages need its precision."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import moments
from lingpipe.core import weight_init


class BatchNormLayer(base_layer.BaseLayer):
  """Batch normalization over all but the last dimension.

  Training: normalizes with the batch's own mean and variance and moves the moving averages towards them
  (moving = decay * moving + (1 - decay) * batch). Evaluation: normalizes with the moving averages.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('dim', 0, 'Depth of the input (last dimension).')
    p.Define('decay', 0.99, 'Decay of the moving mean and variance.')
    p.Define('epsilon', 1e-3, 'Added to the variance before the square root.')
    p.Define('use_moving_stats_in_training', False, 'Normalize with the moving statistics even in training '
             '(frozen batch norm, for fine-tuning).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.dim <= 0:
      raise errors.ConfigError('Layer %s: dim must be positive, got %d.' % (self.path, p.dim))
    if not 0.0 <= p.decay < 1.0:
      raise errors.ConfigError('Layer %s: decay must be in [0, 1), got %r.' % (self.path, p.decay))
    zeros, ones = weight_init.WeightInit.Constant(0.0), weight_init.WeightInit.Constant(1.0)
    self.CreateVariable('beta', weight_init.WeightParams([p.dim], zeros), keep_dtype=True)
    self.CreateVariable('gamma', weight_init.WeightParams([p.dim], ones), keep_dtype=True)
    self.CreateVariable('moving_mean', weight_init.WeightParams([p.dim], zeros, trainable=False))
    self.CreateVariable('moving_variance', weight_init.WeightParams([p.dim], ones, trainable=False))

  def ComputeMoments(self, inputs):
    """(mean, variance, moments.Moments) of `inputs` over every axis but the last. Inside context.RealRows only
    the real rows count: pad rows enter no statistic, and the Moments' count is the number of real values."""
    axes = list(range(inputs.shape.rank - 1))
    per_row = tf.cast(tf.reduce_prod(tf.shape(inputs)[:-1]), inputs.dtype)
    real_rows = context.CurrentRealRows()
    if real_rows is None:
      mean, variance = tf.nn.moments(inputs, axes=axes)
      return mean, variance, moments.Moments.Of(mean, variance, per_row)
    batch_dim, count = real_rows
    if batch_dim not in axes:
      raise errors.ShapeError('Layer %s: inputs of shape %s have no batch dimension %d (the pipeline\'s '
                              'batch_dim) to leave its pad rows out of.' % (self.path, inputs.shape, batch_dim))
    mask = tf.sequence_mask(count, tf.shape(inputs)[batch_dim], dtype=inputs.dtype)
    mask = tf.reshape(mask, [-1 if i == batch_dim else 1 for i in range(inputs.shape.rank)])
    weights = tf.broadcast_to(mask, tf.shape(inputs))
    total = tf.reduce_sum(weights, axis=axes)
    mean = tf.math.divide_no_nan(tf.reduce_sum(weights * inputs, axis=axes), total)  # 0 for an all-pad part.
    # As tf.nn.moments: no gradient through the mean inside the variance (the same value, the same float path).
    variance = tf.math.divide_no_nan(
        tf.reduce_sum(weights * tf.math.squared_difference(inputs, tf.stop_gradient(mean)), axis=axes), total)
    real = tf.cast(count, inputs.dtype) * per_row / tf.cast(tf.shape(inputs)[batch_dim], inputs.dtype)
    return mean, variance, moments.Moments.Of(mean, variance, real)

  def UpdateMovingStats(self, mean, variance):
    """Moves the moving averages towards (mean, variance); returns the update ops' group."""
    decay = tf.cast(self.params.decay, mean.dtype)
    return tf.group(self.moving_mean.assign(self.moving_mean * decay + (1.0 - decay) * mean),
                    self.moving_variance.assign(self.moving_variance * decay + (1.0 - decay) * variance))

  def FProp(self, inputs):
    p = self.params
    self.CheckInputShape(inputs, min_rank=2, last_dim=p.dim)
    inputs, theta = tf.cast(inputs, p.dtype), self.theta
    if context.IsTraining() and not p.use_moving_stats_in_training:
      mean, variance, part = self.ComputeMoments(inputs)
      collector = context.CurrentBatchNormStats()
      if collector is None:
        self.UpdateMovingStats(mean, variance)
      else:  # In a task or a pipeline: the averages move once per step, by the moments of all parts.
        collector.Add(self, part)
    else:
      mean, variance = self.moving_mean, self.moving_variance
    return self.ToFProp(tf.nn.batch_normalization(inputs, mean, variance, theta.beta, theta.gamma, p.epsilon))

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta(input_shape, 8 * (input_shape.num_elements() or 0))
