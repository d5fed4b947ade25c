"""Spatial pooling over NHWC images: windowed max/average, and global pooling to [N, C]."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors

_TYPES = ('MAX', 'AVG')


def MaxPool2D(inputs, window_shape, strides, padding):
  """tf.nn.max_pool2d whose gradient re-computes the pooling next to it.

  Why: oneDNN pairs MaxPool with its gradient through a workspace only when both are in one graph. When the
  forward runs in a traced function that is not inlined (a pipeline cell's stored-activation task) and its gradient
  is built outside it, TensorFlow falls back to the reference MaxPoolGrad kernel, several times slower (most of
  AmoebaNet-D's stored-activation backward). Re-computing the pooling inside the gradient keeps the fast pair
  wherever the gradient is built, for the cost of one pooling.
  """
  ksize, stride_list = [1, *window_shape, 1], [1, *strides, 1]

  def Pool(x):
    return tf.nn.max_pool2d(x, ksize, stride_list, padding)

  @tf.custom_gradient
  def Forward(x):

    def Grad(dy):
      return tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=Pool(x), grad=dy, ksize=ksize, strides=stride_list,
                                    padding=padding)

    return Pool(x), Grad

  return Forward(inputs)


def _CheckType(layer, pooling_type):
  if pooling_type not in _TYPES:
    raise errors.ConfigError('Layer %s: pooling_type must be one of %s, got %r.' % (
        layer.path, ', '.join(_TYPES), pooling_type))


class Pooling2DLayer(base_layer.BaseLayer):
  """Max or average pooling with a window and stride."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('window_shape', (2, 2), 'Window [height, width].')
    p.Define('window_stride', (2, 2), 'Stride [height, width].')
    p.Define('padding', 'SAME', "'SAME' or 'VALID'.")
    p.Define('pooling_type', 'MAX', "'MAX' or 'AVG'.")
    return p

  def __init__(self, params):
    super().__init__(params)
    _CheckType(self, self.params.pooling_type)
    if self.params.padding not in ('SAME', 'VALID'):
      raise errors.ConfigError("Layer %s: padding must be 'SAME' or 'VALID', got %r." % (
          self.path, self.params.padding))

  def FProp(self, inputs):
    p = self.params
    self.CheckInputShape(inputs, rank=4)
    if p.pooling_type == 'MAX':
      return MaxPool2D(inputs, list(p.window_shape), list(p.window_stride), p.padding)
    return tf.nn.pool(inputs, window_shape=list(p.window_shape), pooling_type=p.pooling_type,
                      strides=list(p.window_stride), padding=p.padding)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    n, h, w, c = tf.TensorShape(input_shape).as_list()

    def Out(size, window, stride):
      if size is None:
        return None
      return -(-size // stride) if params.padding == 'SAME' else (size - window) // stride + 1

    oh = Out(h, params.window_shape[0], params.window_stride[0])
    ow = Out(w, params.window_shape[1], params.window_stride[1])
    flops = (n or 0) * (oh or 0) * (ow or 0) * c * params.window_shape[0] * params.window_shape[1]
    return base_layer.Meta([n, oh, ow, c], flops)


class GlobalPoolingLayer(base_layer.BaseLayer):
  """Pools [N, H, W, C] over H and W to [N, C]."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('pooling_type', 'AVG', "'MAX' or 'AVG'.")
    return p

  def __init__(self, params):
    super().__init__(params)
    _CheckType(self, self.params.pooling_type)

  def FProp(self, inputs):
    self.CheckInputShape(inputs, rank=4)
    reduce = tf.reduce_max if self.params.pooling_type == 'MAX' else tf.reduce_mean
    return reduce(inputs, axis=[1, 2])

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta([input_shape[0], input_shape[3]], input_shape.num_elements() or 0)
