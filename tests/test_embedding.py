"""EmbeddingLayer: lookup, scaling, meta, errors."""

import math

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.layers import embedding
from layer_test_util import Build, CheckMeta


def test_lookup_and_scale():
  layer = Build(embedding.EmbeddingLayer, vocab_size=10, embedding_dim=4, scale_sqrt_depth=True)
  ids = np.array([[1, 2], [9, 0]], np.int32)
  np.testing.assert_allclose(layer.FProp(tf.constant(ids)).numpy(), layer.emb.numpy()[ids] * math.sqrt(4),
                             rtol=1e-6)
  assert CheckMeta(layer, ids).out_shapes[0].as_list() == [2, 2, 4]
  assert abs(layer.emb.numpy().std() - 0.5) < 0.2


def test_errors():
  with pytest.raises(errors.ConfigError, match='must be positive'):
    Build(embedding.EmbeddingLayer, vocab_size=0, embedding_dim=4)
  with pytest.raises(errors.ShapeError, match='ids must be integers, got float32'):
    Build(embedding.EmbeddingLayer, vocab_size=3, embedding_dim=2).FProp(tf.zeros([2]))
