"""Layer normalization over the last dimension, its statistics computed in the variables' dtype (float32) whatever
the compute dtype: they need its precision.

Its backward keeps only the input, in the compute dtype, and two float32 numbers a row (the mean and the inverse
standard deviation), and re-derives the normalized input from them: autodiff would keep the centred input in
float32, which in bfloat16 is twice the input itself and most of a Transformer layer's stash.
"""

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
    return self.ToFProp(_Normalize(inputs, tf.convert_to_tensor(theta.scale), tf.convert_to_tensor(theta.bias),
                                   self.params.epsilon))

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta(input_shape, 8 * (input_shape.num_elements() or 0))


def _Normalize(inputs, scale, bias, epsilon):
  """(x - mean) / sqrt(variance + epsilon) * scale + bias over the last dimension, in scale's dtype, with the
  gradient of that formula, keeping for it `inputs` as given and float32-sized statistics (the module docstring)."""
  dtype = scale.dtype

  @tf.custom_gradient
  def Normalize(x_in, scale, bias):
    x = tf.cast(x_in, dtype)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    inverse = tf.math.rsqrt(variance + epsilon)
    y = (x - mean) * inverse * scale + bias

    def Grad(dy):
      dy = tf.cast(dy, dtype)
      normalized = (tf.cast(x_in, dtype) - mean) * inverse  # Re-derived, not kept.
      rows = list(range(len(dy.shape) - 1))
      d_scale = tf.reduce_sum(dy * normalized, axis=rows)
      d_bias = tf.reduce_sum(dy, axis=rows)
      d_normalized = dy * scale
      dx = inverse * (d_normalized - tf.reduce_mean(d_normalized, axis=-1, keepdims=True)
                      - normalized * tf.reduce_mean(d_normalized * normalized, axis=-1, keepdims=True))
      return tf.cast(dx, x_in.dtype), d_scale, d_bias

    return y, Grad

  return Normalize(inputs, scale, bias)
