"""ProjectionLayer: y = activation(x W + b) over the last dimension."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core import weight_init
from lingpipe.layers import activations


class ProjectionLayer(base_layer.BaseLayer):
  """A dense projection of the last dimension, with optional bias and activation."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Depth of the input (last dimension).')
    p.Define('output_dim', 0, 'Depth of the output.')
    p.Define('has_bias', True, 'Whether to add a bias.')
    p.Define('activation', 'none', 'Activation after the projection: one of %s.' % ', '.join(activations.NAMES))
    p.Define('bias_init', 0.0, 'Initial value of the bias.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.input_dim <= 0 or p.output_dim <= 0:
      raise errors.ConfigError('Layer %s: input_dim and output_dim must be positive, got %d and %d.'
                                          % (self.path, p.input_dim, p.output_dim))
    activations.Check(p.activation)
    self.CreateVariable('w', weight_init.WeightParams([p.input_dim, p.output_dim]))
    if p.has_bias:
      self.CreateVariable('b', weight_init.WeightParams([p.output_dim], weight_init.WeightInit.Constant(
          p.bias_init)))

  def FProp(self, inputs):
    p = self.params
    self.CheckInputShape(inputs, min_rank=1, last_dim=p.input_dim)
    inputs, theta = self.ToFProp(inputs), self.theta
    out = tf.tensordot(inputs, theta.w, axes=[[inputs.shape.rank - 1], [0]])
    if p.has_bias:
      out += theta.b
    return activations.GetFn(p.activation)(out)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    rows = input_shape[:-1].num_elements() or 0
    return base_layer.Meta(input_shape[:-1].concatenate([params.output_dim]),
                           2 * rows * params.input_dim * params.output_dim)
