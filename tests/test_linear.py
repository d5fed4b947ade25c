"""ProjectionLayer: NumPy reference, activations, ranks, meta, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.layers import linear
from layer_test_util import Build, CheckMeta, Random


def test_matches_numpy_with_bias_and_relu():
  layer = Build(linear.ProjectionLayer, input_dim=4, output_dim=3, activation='relu', bias_init=0.1)
  x = Random([2, 5, 4])
  expected = np.maximum(x @ layer.w.numpy() + 0.1, 0)
  np.testing.assert_allclose(layer.FProp(tf.constant(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
  meta = CheckMeta(layer, x)
  assert meta.flops == 2 * 10 * 4 * 3


def test_no_bias_and_dtype():
  layer = Build(linear.ProjectionLayer, input_dim=2, output_dim=2, has_bias=False, dtype=tf.float64)
  assert 'b' not in layer.vars and layer.w.dtype == tf.float64
  out = layer.FProp(tf.constant(Random([3, 2], dtype=np.float64)))
  assert out.dtype == tf.float64


def test_errors():
  with pytest.raises(errors.ConfigError, match='must be positive'):
    Build(linear.ProjectionLayer, input_dim=0, output_dim=2)
  with pytest.raises(errors.ConfigError, match="Unknown activation 'rleu'.*Did you mean: relu"):
    Build(linear.ProjectionLayer, input_dim=1, output_dim=2, activation='rleu')
  layer = Build(linear.ProjectionLayer, input_dim=4, output_dim=3)
  with pytest.raises(errors.ShapeError, match=r'layer \(ProjectionLayer\).*last dimension 4; got shape \[2, 3\]'):
    layer.FProp(tf.zeros([2, 3]))
