"""BatchNormLayer: training uses batch moments and moves the averages; evaluation uses the averages."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.layers import batch_norm
from layer_test_util import Build, CheckMeta, Random


def test_training_normalizes_with_batch_moments_and_updates_moving_stats():
  layer = Build(batch_norm.BatchNormLayer, dim=3, decay=0.9, epsilon=1e-5)
  x = Random([4, 5, 3]) * 2 + 1
  with context.Training(True):
    out = layer.FProp(tf.constant(x)).numpy()
  mean, var = x.mean(axis=(0, 1)), x.var(axis=(0, 1))
  np.testing.assert_allclose(out, (x - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(layer.moving_mean.numpy(), 0.1 * mean, rtol=1e-5)
  np.testing.assert_allclose(layer.moving_variance.numpy(), 0.9 + 0.1 * var, rtol=1e-5)


def test_eval_uses_moving_stats_and_does_not_update_them():
  layer = Build(batch_norm.BatchNormLayer, dim=2, epsilon=0.0)
  x = Random([8, 2])
  out = layer.FProp(tf.constant(x)).numpy()
  np.testing.assert_allclose(out, x, rtol=1e-6)  # moving mean 0, variance 1
  np.testing.assert_array_equal(layer.moving_mean.numpy(), [0, 0])
  CheckMeta(layer, x)


def test_frozen_batch_norm_in_training():
  layer = Build(batch_norm.BatchNormLayer, dim=2, use_moving_stats_in_training=True, epsilon=0.0)
  with context.Training(True):
    np.testing.assert_allclose(layer.FProp(tf.ones([3, 2])).numpy(), np.ones([3, 2]))


def test_errors():
  with pytest.raises(errors.ConfigError, match='dim must be positive'):
    Build(batch_norm.BatchNormLayer, dim=0)
  with pytest.raises(errors.ConfigError, match='decay must be in'):
    Build(batch_norm.BatchNormLayer, dim=2, decay=1.0)
  with pytest.raises(errors.ShapeError, match='last dimension 2'):
    Build(batch_norm.BatchNormLayer, dim=2).FProp(tf.zeros([3, 4]))
