"""2-D convolutions over NHWC images: plain, depthwise, and separable (depthwise then 1x1 pointwise)."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core import weight_init
from lingpipe.layers import activations


def _OutSize(size, window, stride, padding, dilation=1):
  if size is None:
    return None
  effective = (window - 1) * dilation + 1
  if padding == 'SAME':
    return -(-size // stride)
  return (size - effective) // stride + 1


def _CheckCommon(layer, p, filter_len):
  if len(p.filter_shape) != filter_len or any(d <= 0 for d in p.filter_shape):
    raise errors.ConfigError('Layer %s: filter_shape must be %d positive ints, got %r.' % (
        layer.path, filter_len, p.filter_shape))
  if p.padding not in ('SAME', 'VALID'):
    raise errors.ConfigError("Layer %s: padding must be 'SAME' or 'VALID', got %r." % (layer.path, p.padding))
  activations.Check(p.activation)


class Conv2DLayer(base_layer.BaseLayer):
  """Convolution with filter_shape [h, w, in, out], then bias and activation."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('filter_shape', (3, 3, 0, 0), 'Filter [height, width, in_depth, out_depth].')
    p.Define('filter_stride', (1, 1), 'Stride [height, width].')
    p.Define('dilation_rate', (1, 1), 'Dilation [height, width].')
    p.Define('padding', 'SAME', "'SAME' or 'VALID'.")
    p.Define('has_bias', False, 'Whether to add a bias (off by default: usually followed by batch norm).')
    p.Define('activation', 'none', 'Activation: one of %s.' % ', '.join(activations.NAMES))
    p.params_init = weight_init.WeightInit.He(1.0)
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    _CheckCommon(self, p, 4)
    self.CreateVariable('w', weight_init.WeightParams(p.filter_shape))
    if p.has_bias:
      self.CreateVariable('b', weight_init.WeightParams([p.filter_shape[3]], weight_init.WeightInit.Constant()))

  def FProp(self, inputs):
    p = self.params
    self.CheckInputShape(inputs, rank=4, last_dim=p.filter_shape[2])
    inputs, theta = self.ToFProp(inputs), self.theta
    out = tf.nn.conv2d(inputs, theta.w, strides=[1] + list(p.filter_stride) + [1], padding=p.padding,
                       dilations=[1] + list(p.dilation_rate) + [1])
    if p.has_bias:
      out += theta.b
    return activations.GetFn(p.activation)(out)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    n, h, w, _ = tf.TensorShape(input_shape).as_list()
    kh, kw, cin, cout = params.filter_shape
    oh = _OutSize(h, kh, params.filter_stride[0], params.padding, params.dilation_rate[0])
    ow = _OutSize(w, kw, params.filter_stride[1], params.padding, params.dilation_rate[1])
    flops = 2 * (n or 0) * (oh or 0) * (ow or 0) * kh * kw * cin * cout
    return base_layer.Meta([n, oh, ow, cout], flops)


class DepthwiseConv2DLayer(base_layer.BaseLayer):
  """Depthwise convolution with filter_shape [h, w, in, multiplier]; output depth in * multiplier."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('filter_shape', (3, 3, 0, 1), 'Filter [height, width, in_depth, channel_multiplier].')
    p.Define('filter_stride', (1, 1), 'Stride [height, width].')
    p.Define('dilation_rate', (1, 1), 'Dilation [height, width].')
    p.Define('padding', 'SAME', "'SAME' or 'VALID'.")
    p.Define('has_bias', False, 'Whether to add a bias.')
    p.Define('activation', 'none', 'Activation: one of %s.' % ', '.join(activations.NAMES))
    p.params_init = weight_init.WeightInit.He(1.0)
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    _CheckCommon(self, p, 4)
    self.CreateVariable('w', weight_init.WeightParams(p.filter_shape))
    if p.has_bias:
      self.CreateVariable('b', weight_init.WeightParams([p.filter_shape[2] * p.filter_shape[3]],
                                                        weight_init.WeightInit.Constant()))

  def FProp(self, inputs):
    p = self.params
    self.CheckInputShape(inputs, rank=4, last_dim=p.filter_shape[2])
    inputs, theta = self.ToFProp(inputs), self.theta
    out = tf.nn.depthwise_conv2d(inputs, theta.w, strides=[1] + list(p.filter_stride) + [1], padding=p.padding,
                                 dilations=list(p.dilation_rate))
    if p.has_bias:
      out += theta.b
    return activations.GetFn(p.activation)(out)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    n, h, w, _ = tf.TensorShape(input_shape).as_list()
    kh, kw, cin, mult = params.filter_shape
    oh = _OutSize(h, kh, params.filter_stride[0], params.padding, params.dilation_rate[0])
    ow = _OutSize(w, kw, params.filter_stride[1], params.padding, params.dilation_rate[1])
    return base_layer.Meta([n, oh, ow, cin * mult], 2 * (n or 0) * (oh or 0) * (ow or 0) * kh * kw * cin * mult)


class SeparableConv2DLayer(base_layer.BaseLayer):
  """Depthwise [h, w, in, 1] convolution followed by a 1x1 convolution to out channels."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('filter_shape', (3, 3, 0, 0), 'Filter [height, width, in_depth, out_depth].')
    p.Define('filter_stride', (1, 1), 'Stride of the depthwise part [height, width].')
    p.Define('dilation_rate', (1, 1), 'Dilation of the depthwise part.')
    p.Define('padding', 'SAME', "'SAME' or 'VALID'.")
    p.Define('activation', 'none', 'Activation after the pointwise part.')
    p.params_init = weight_init.WeightInit.He(1.0)
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    _CheckCommon(self, p, 4)
    kh, kw, cin, cout = p.filter_shape
    self.CreateChild('depthwise', DepthwiseConv2DLayer.Params().Set(
        filter_shape=(kh, kw, cin, 1), filter_stride=p.filter_stride, dilation_rate=p.dilation_rate,
        padding=p.padding, params_init=p.params_init))
    self.CreateChild('pointwise', Conv2DLayer.Params().Set(
        filter_shape=(1, 1, cin, cout), activation=p.activation, params_init=p.params_init))

  def FProp(self, inputs):
    return self.pointwise.FProp(self.depthwise.FProp(inputs))

  @classmethod
  def FPropMeta(cls, params, input_shape):
    kh, kw, cin, cout = params.filter_shape
    dw = DepthwiseConv2DLayer.Params().Set(filter_shape=(kh, kw, cin, 1), filter_stride=params.filter_stride,
                                           dilation_rate=params.dilation_rate, padding=params.padding)
    pw = Conv2DLayer.Params().Set(filter_shape=(1, 1, cin, cout))
    m1 = DepthwiseConv2DLayer.FPropMeta(dw, input_shape)
    m2 = Conv2DLayer.FPropMeta(pw, m1.out_shapes[0])
    return base_layer.Meta(m2.out_shapes, m1.flops + m2.flops)
