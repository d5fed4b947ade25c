"""EmbeddingLayer: a [vocab_size, embedding_dim] table looked up by integer ids."""

import math

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core import weight_init


class EmbeddingLayer(base_layer.BaseLayer):
  """Looks up ids in a table; optionally scales by sqrt(embedding_dim) as in the Transformer."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('vocab_size', 0, 'Number of rows of the table.')
    p.Define('embedding_dim', 0, 'Depth of an embedding.')
    p.Define('scale_sqrt_depth', False, 'Multiply the looked-up embeddings by sqrt(embedding_dim).')
    p.params_init = None
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.vocab_size <= 0 or p.embedding_dim <= 0:
      raise errors.ConfigError('Layer %s: vocab_size and embedding_dim must be positive, got %d and %d.' % (
          self.path, p.vocab_size, p.embedding_dim))
    init = p.params_init or weight_init.WeightInit.Gaussian(1.0 / math.sqrt(p.embedding_dim))
    self.CreateVariable('emb', weight_init.WeightParams([p.vocab_size, p.embedding_dim], init))

  def FProp(self, ids):
    p = self.params
    if not ids.dtype.is_integer:
      raise errors.ShapeError('Layer %s (EmbeddingLayer): ids must be integers, got %s.' % (
          self.path, ids.dtype.name))
    out = tf.gather(self.theta.emb, ids)
    if p.scale_sqrt_depth:
      out *= math.sqrt(p.embedding_dim)
    return out

  @classmethod
  def FPropMeta(cls, params, ids_shape):
    ids_shape = tf.TensorShape(ids_shape)
    return base_layer.Meta(ids_shape.concatenate([params.embedding_dim]),
                           (ids_shape.num_elements() or 0) * params.embedding_dim)
