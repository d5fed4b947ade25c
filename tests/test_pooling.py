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
