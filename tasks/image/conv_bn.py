"""ConvBn: a bias-free convolution (or depthwise-separable one) and batch norm, with the ReLU before (AmoebaNet) or
after (ResNet), or none."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.layers import batch_norm
from lingpipe.layers import conv

RELU = ('before', 'after', 'none')


class ConvBn(base_layer.BaseLayer):
  """[relu ->] conv (no bias) -> batch norm [-> relu]."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('filter_shape', (3, 3, 0, 0), 'Filter [h, w, in, out].')
    p.Define('filter_stride', (1, 1), 'Stride [h, w].')
    p.Define('relu', 'after', 'Where the ReLU goes: one of %s.' % ', '.join(RELU))
    p.Define('padding', 'SAME', "'SAME' or 'VALID'.")
    p.Define('separable', False, 'A depthwise-separable convolution (depthwise, then 1x1 to the output channels).')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Batch norm template (dim is set here).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.relu not in RELU:
      raise errors.ConfigError('Layer %s: relu must be one of %s, got %r.' % (self.path, ', '.join(RELU), p.relu))
    self.CreateChild('conv', self._Conv(p))
    self.CreateChild('bn', p.bn_tpl.Copy().Set(dim=p.filter_shape[3]))

  @classmethod
  def _Conv(cls, params):
    kind = conv.SeparableConv2DLayer if params.separable else conv.Conv2DLayer
    return kind.Params().Set(filter_shape=params.filter_shape, filter_stride=params.filter_stride,
                             padding=params.padding)

  def FProp(self, inputs):
    relu = self.params.relu
    out = self.bn.FProp(self.conv.FProp(tf.nn.relu(inputs) if relu == 'before' else inputs))
    return tf.nn.relu(out) if relu == 'after' else out

  @classmethod
  def FPropMeta(cls, params, input_shape):
    conv_params = cls._Conv(params)
    meta = conv_params.cls.FPropMeta(conv_params, input_shape)
    return base_layer.Meta(meta.out_shapes[0], meta.flops + 10 * (meta.out_shapes[0].num_elements() or 0))
