"""SequentialLayer: composition, meta summed over children, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.layers import linear
from lingpipe.layers import sequential
from layer_test_util import Build, CheckMeta, Random


def test_applies_children_in_order_and_sums_flops():
  subs = [linear.ProjectionLayer.Params().Set(input_dim=4, output_dim=8, activation='tanh'),
          linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=2)]
  layer = Build(sequential.SequentialLayer, sub=subs)
  x = Random([3, 4])
  h = np.tanh(x @ layer.sub[0].w.numpy())
  np.testing.assert_allclose(layer.FProp(tf.constant(x)).numpy(), h @ layer.sub[1].w.numpy(), rtol=1e-5,
                             atol=1e-6)
  assert CheckMeta(layer, x).flops == 2 * 3 * 4 * 8 + 2 * 3 * 8 * 2
  assert [c.path for c in layer.sub] == ['layer/sub_0', 'layer/sub_1']


def test_errors():
  with pytest.raises(errors.ConfigError, match='sub is empty'):
    Build(sequential.SequentialLayer)
  layer = Build(sequential.SequentialLayer, sub=[linear.ProjectionLayer.Params().Set(input_dim=4, output_dim=8),
                                                 linear.ProjectionLayer.Params().Set(input_dim=4, output_dim=2)])
  with pytest.raises(errors.ShapeError, match=r'Layer layer/sub_1 .*last dimension 4; got shape \[3, 8\]'):
    layer.FProp(tf.zeros([3, 4]))
