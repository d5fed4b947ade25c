"""A CIFAR ResNet (He et al. 2016, 6n+2 layers) as a flat list of layers that a PipeliningLayer can cut anywhere."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.layers import batch_norm
from lingpipe.layers import pooling
from lingpipe.tasks.image.conv_bn import ConvBn


class ResidualBlock(base_layer.BaseLayer):
  """relu(ConvBn(ConvBn(x)) + shortcut(x)); the shortcut is a strided 1x1 ConvBn when the shape changes."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Input channels.')
    p.Define('output_dim', 0, 'Output channels.')
    p.Define('stride', 1, 'Stride of the first convolution (2 halves the resolution).')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Template of the batch norms.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.input_dim <= 0 or p.output_dim <= 0:
      raise errors.ConfigError('Layer %s: input_dim and output_dim must be positive.' % self.path)
    strides = (p.stride, p.stride)
    self.CreateChild('conv1', ConvBn.Params().Set(filter_shape=(3, 3, p.input_dim, p.output_dim),
                                                  filter_stride=strides, bn_tpl=p.bn_tpl))
    self.CreateChild('conv2', ConvBn.Params().Set(filter_shape=(3, 3, p.output_dim, p.output_dim), relu='none',
                                                  bn_tpl=p.bn_tpl))
    if p.stride != 1 or p.input_dim != p.output_dim:
      self.CreateChild('shortcut', ConvBn.Params().Set(filter_shape=(1, 1, p.input_dim, p.output_dim),
                                                       filter_stride=strides, relu='none', bn_tpl=p.bn_tpl))

  def FProp(self, inputs):
    shortcut = self.shortcut.FProp(inputs) if 'shortcut' in self.children else inputs
    return tf.nn.relu(self.conv2.FProp(self.conv1.FProp(inputs)) + shortcut)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    c1 = ConvBn.FPropMeta(ConvBn.Params().Set(filter_shape=(3, 3, params.input_dim, params.output_dim),
                                              filter_stride=(params.stride, params.stride)), input_shape)
    c2 = ConvBn.FPropMeta(ConvBn.Params().Set(filter_shape=(3, 3, params.output_dim, params.output_dim)),
                          c1.out_shapes[0])
    return base_layer.Meta(c2.out_shapes[0], 2 * c1.flops + c2.flops)


def ResNetLayers(depth=20, width=16, bn_tpl=None):
  """Layer Params of a CIFAR ResNet-<depth> (depth = 6n+2): stem, 3 stages of n blocks, global average pool.

  The output is [batch, 4 * width] features; bn_tpl (BatchNormLayer Params) configures every batch norm.
  """
  bn_tpl = bn_tpl or batch_norm.BatchNormLayer.Params()
  if (depth - 2) % 6 or depth < 8:
    raise errors.ConfigError('ResNet depth must be 6n+2 (8, 14, 20, 32, 56, ...), got %d.' % depth)
  n = (depth - 2) // 6
  layers = [ConvBn.Params().Set(filter_shape=(3, 3, 3, width), bn_tpl=bn_tpl)]
  channels = width
  for stage in range(3):
    out = width * 2**stage
    for i in range(n):
      stride = 2 if stage > 0 and i == 0 else 1
      layers.append(ResidualBlock.Params().Set(input_dim=channels, output_dim=out, stride=stride, bn_tpl=bn_tpl))
      channels = out
  layers.append(pooling.GlobalPoolingLayer.Params())
  return layers
