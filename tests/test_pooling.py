"""Pooling2DLayer and GlobalPoolingLayer: NumPy references, shapes, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.layers import pooling
from layer_test_util import Build, CheckMeta, Random


def test_max_and_avg_pool_match_numpy():
  x = Random([2, 4, 4, 3])
  blocks = x.reshape(2, 2, 2, 2, 2, 3)
  out_max = Build(pooling.Pooling2DLayer, pooling_type='MAX').FProp(tf.constant(x)).numpy()
  out_avg = Build(pooling.Pooling2DLayer, pooling_type='AVG').FProp(tf.constant(x)).numpy()
  np.testing.assert_allclose(out_max, blocks.max(axis=(2, 4)), rtol=1e-6)
  np.testing.assert_allclose(out_avg, blocks.mean(axis=(2, 4)), rtol=1e-5)
  assert CheckMeta(Build(pooling.Pooling2DLayer, window_shape=(3, 3), padding='VALID', window_stride=(1, 1)),
                   x).out_shapes[0].as_list() == [2, 2, 2, 3]


@pytest.mark.parametrize('window, stride, padding', [(3, 1, 'SAME'), (2, 2, 'SAME'), (3, 2, 'VALID')])
def test_max_pool_gradient_matches_tensorflow_inline_and_across_a_traced_call(window, stride, padding):
  # Ties make a max pool's gradient ambiguous: distinct values keep the comparison exact.
  x = tf.constant(np.random.RandomState(0).permutation(2 * 7 * 7 * 3).reshape(2, 7, 7, 3), tf.float32)
  layer = Build(pooling.Pooling2DLayer, window_shape=(window, window), window_stride=(stride, stride),
                padding=padding)
  reference = lambda t: tf.nn.max_pool2d(t, window, stride, padding)
  not_inlined = tf.function(layer.FProp, autograph=False, experimental_attributes={'_noinline': True})

  @tf.function(autograph=False)
  def Gradients(t):
    grads = []
    for fn in (reference, layer.FProp, not_inlined):
      with tf.GradientTape() as tape:
        tape.watch(t)
        y = fn(t)
      grads.append((y, tape.gradient(y, t, output_gradients=tf.sin(y))))
    return grads

  (ref_out, ref_grad), *others = Gradients(x)
  assert float(tf.reduce_sum(tf.abs(ref_grad))) > 0
  for out, grad in others:
    np.testing.assert_array_equal(out.numpy(), ref_out.numpy())
    np.testing.assert_allclose(grad.numpy(), ref_grad.numpy(), rtol=1e-6)


def test_global_pooling():
  x = Random([2, 3, 5, 4])
  np.testing.assert_allclose(Build(pooling.GlobalPoolingLayer).FProp(tf.constant(x)).numpy(), x.mean(axis=(1, 2)),
                             rtol=1e-5)
  np.testing.assert_allclose(Build(pooling.GlobalPoolingLayer, pooling_type='MAX').FProp(tf.constant(x)).numpy(),
                             x.max(axis=(1, 2)))
  CheckMeta(Build(pooling.GlobalPoolingLayer), x)


def test_errors():
  with pytest.raises(errors.ConfigError, match="pooling_type must be one of MAX, AVG, got 'MEAN'"):
    Build(pooling.Pooling2DLayer, pooling_type='MEAN')
  with pytest.raises(errors.ShapeError, match=r'rank 4; got shape \[2, 3\]'):
    Build(pooling.GlobalPoolingLayer).FProp(tf.zeros([2, 3]))
