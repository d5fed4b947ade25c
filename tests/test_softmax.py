"""SoftmaxLayer: logits, clipping, cross-entropy with label smoothing and weights, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.layers import softmax
from layer_test_util import Build, Random


def _LogSoftmax(z):
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_xent_with_label_smoothing_and_weights_matches_numpy():
  layer = Build(softmax.SoftmaxLayer, input_dim=5, num_classes=4, label_smoothing=0.1)
  x, ids, weights = Random([3, 5]), np.array([0, 3, 1]), np.array([1.0, 0.0, 2.0], np.float32)
  out = layer.FProp(tf.constant(x), class_ids=tf.constant(ids), class_weights=tf.constant(weights))
  logits = x @ layer.w.numpy() + layer.b.numpy()
  targets = np.eye(4)[ids] * 0.9 + 0.1 / 4
  xent = -(targets * _LogSoftmax(logits)).sum(-1)
  np.testing.assert_allclose(out.per_example_xent.numpy(), xent, rtol=1e-5)
  np.testing.assert_allclose(out.avg_xent.numpy(), (xent * weights).sum() / 3.0, rtol=1e-5)
  meta = softmax.SoftmaxLayer.FPropMeta(layer.params, [3, 5])
  assert meta.out_shapes[0].as_list() == list(out.logits.shape) and meta.flops > 0


def test_logit_clipping():
  layer = Build(softmax.SoftmaxLayer, input_dim=2, num_classes=3, logits_abs_max=0.5)
  logits = layer.Logits(tf.constant(Random([10, 2]) * 100)).numpy()
  assert np.abs(logits).max() <= 0.5


def test_errors():
  with pytest.raises(errors.ConfigError, match='num_classes > 1'):
    Build(softmax.SoftmaxLayer, input_dim=2, num_classes=1)
  with pytest.raises(errors.ConfigError, match='label_smoothing must be in'):
    Build(softmax.SoftmaxLayer, input_dim=2, num_classes=3, label_smoothing=1.0)
