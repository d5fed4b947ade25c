"""LayerNormLayer: NumPy reference, dtypes, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.layers import layer_norm
from layer_test_util import Build, CheckMeta, Random


def test_matches_numpy():
  layer = Build(layer_norm.LayerNormLayer, dim=6, epsilon=1e-6)
  x = Random([2, 3, 6]) * 3 + 2
  mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
  np.testing.assert_allclose(layer.FProp(tf.constant(x)).numpy(), (x - mean) / np.sqrt(var + 1e-6), rtol=1e-4,
                             atol=1e-5)
  CheckMeta(layer, x)


def test_float64():
  layer = Build(layer_norm.LayerNormLayer, dim=2, dtype=tf.float64)
  assert layer.FProp(tf.constant(Random([1, 2], dtype=np.float64))).dtype == tf.float64


def test_errors():
  with pytest.raises(errors.ConfigError, match='dim must be positive'):
    Build(layer_norm.LayerNormLayer, dim=-1)
  with pytest.raises(errors.ShapeError, match=r'last dimension 6; got shape \[2, 5\]'):
    Build(layer_norm.LayerNormLayer, dim=6).FProp(tf.zeros([2, 5]))


@pytest.mark.parametrize('dtype', [tf.float32, tf.bfloat16])
def test_gradients_equal_autodiffs_of_the_formula(dtype):
  layer = Build(layer_norm.LayerNormLayer, dim=6)
  layer.theta  # pylint: disable=pointless-statement
  x = tf.constant(Random([3, 4, 6]) * 3 + 2, dtype)
  dy = tf.constant(Random([3, 4, 6], seed=1), tf.float32)
  scale, bias = layer.vars.scale, layer.vars.bias
  scale.assign(tf.constant(Random([6], seed=2), tf.float32))
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    y = tf.cast(layer.FProp(x), tf.float32)
    xf = tf.cast(x, tf.float32)
    mean, var = tf.nn.moments(xf, axes=[-1], keepdims=True)
    ref = (xf - mean) * tf.math.rsqrt(var + 1e-6) * scale + bias
  grads = tape.gradient(y, [x, scale, bias], output_gradients=dy)
  expected = tape.gradient(ref, [x, scale, bias], output_gradients=dy)
  np.testing.assert_allclose(y.numpy(), tf.cast(tf.cast(ref, dtype), tf.float32).numpy(), rtol=1e-2, atol=1e-2)
  for got, want in zip(grads, expected):
    np.testing.assert_allclose(tf.cast(got, tf.float32).numpy(), tf.cast(tf.cast(want, got.dtype), tf.float32),
                               rtol=2e-2 if dtype == tf.bfloat16 else 1e-4, atol=2e-2 if dtype == tf.bfloat16 else 1e-4)
  assert grads[0].dtype == dtype
