"""Conv2D, depthwise and separable convolutions: NumPy references, shapes, meta, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.layers import conv
from layer_test_util import Build, CheckMeta, Random


def _NumpyConvValid(x, w, stride=1):
  n, h, wd, _ = x.shape
  kh, kw, _, cout = w.shape
  oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
  out = np.zeros([n, oh, ow, cout])
  for i in range(oh):
    for j in range(ow):
      patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
      out[:, i, j, :] = np.tensordot(patch, w, axes=[[1, 2, 3], [0, 1, 2]])
  return out


def test_conv2d_matches_numpy():
  layer = Build(conv.Conv2DLayer, filter_shape=(3, 3, 2, 4), padding='VALID', filter_stride=(2, 2), has_bias=True)
  x = Random([2, 7, 7, 2])
  out = layer.FProp(tf.constant(x)).numpy()
  np.testing.assert_allclose(out, _NumpyConvValid(x, layer.w.numpy(), 2), rtol=1e-4, atol=1e-5)
  meta = CheckMeta(layer, x)
  assert meta.flops == 2 * 2 * 3 * 3 * 3 * 3 * 2 * 4


def test_same_padding_shape_and_meta():
  layer = Build(conv.Conv2DLayer, filter_shape=(3, 3, 3, 8), filter_stride=(2, 2))
  assert CheckMeta(layer, Random([1, 9, 9, 3])).out_shapes[0].as_list() == [1, 5, 5, 8]


def test_depthwise_matches_numpy():
  layer = Build(conv.DepthwiseConv2DLayer, filter_shape=(3, 3, 2, 2), padding='VALID')
  x = Random([1, 5, 5, 2])
  out = layer.FProp(tf.constant(x)).numpy()
  w = layer.w.numpy()
  for c in range(2):
    for m in range(2):
      ref = _NumpyConvValid(x[..., c:c + 1], w[:, :, c:c + 1, m:m + 1])[..., 0]
      np.testing.assert_allclose(out[..., c * 2 + m], ref, rtol=1e-4, atol=1e-5)
  CheckMeta(layer, x)


def test_separable_is_depthwise_then_pointwise():
  layer = Build(conv.SeparableConv2DLayer, filter_shape=(3, 3, 4, 6), activation='relu')
  x = Random([2, 6, 6, 4])
  out = layer.FProp(tf.constant(x)).numpy()
  ref = tf.nn.relu(tf.nn.separable_conv2d(x, layer.depthwise.w, layer.pointwise.w, [1, 1, 1, 1], 'SAME'))
  np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-5)
  assert CheckMeta(layer, x).out_shapes[0].as_list() == [2, 6, 6, 6]


def test_errors():
  with pytest.raises(errors.ConfigError, match='filter_shape must be 4 positive ints'):
    Build(conv.Conv2DLayer, filter_shape=(3, 3, 0, 4))
  with pytest.raises(errors.ConfigError, match="padding must be 'SAME' or 'VALID'"):
    Build(conv.Conv2DLayer, filter_shape=(3, 3, 1, 4), padding='same')
  layer = Build(conv.Conv2DLayer, filter_shape=(3, 3, 3, 4))
  with pytest.raises(errors.ShapeError, match=r'rank 4 and last dimension 3; got shape \[2, 8, 8\]'):
    layer.FProp(tf.zeros([2, 8, 8]))
  with pytest.raises(errors.ShapeError, match=r'got shape \[2, 8, 8, 1\]'):
    layer.FProp(tf.zeros([2, 8, 8, 1]))
