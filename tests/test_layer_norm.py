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
