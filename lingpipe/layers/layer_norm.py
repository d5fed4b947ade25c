"""Layer normalization over the last dimension, computed in the variables' dtype (float32) whatever the
compute dtype: the statistics need its precision."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core import weight_init


class LayerNormLayer(base_layer.BaseLayer):
  """Layer normalization over the last dimension with a learned scale and bias."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('dim', 0, 'Depth of the input (last dimension).')
    p.Define('epsilon', 1e-6, 'Added to the variance before the square root.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.dim <= 0:
      raise errors.ConfigError('Layer %s: dim must be positive, got %d.' % (self.path, p.dim))
    self.CreateVariable('scale', weight_init.WeightParams([p.dim], weight_init.WeightInit.Constant(1.0)),
                        keep_dtype=True)
    self.CreateVariable('bias', weight_init.WeightParams([p.dim], weight_init.WeightInit.Constant(0.0)),
                        keep_dtype=True)

  def FProp(self, inputs):
    self.CheckInputShape(inputs, min_rank=1, last_dim=self.params.dim)
    theta = self.theta
    x = tf.cast(inputs, self.params.dtype)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return self.ToFProp((x - mean) * tf.math.rsqrt(variance + self.params.epsilon) * theta.scale + theta.bias)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta(input_shape, 8 * (input_shape.num_elements() or 0))
