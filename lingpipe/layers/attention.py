"""Multi-head dot-product attention over [batch, time, dim] sequences with padding masks."""

import math

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core import weight_init


class MultiHeadAttention(base_layer.BaseLayer):
  """softmax(Q K^T / sqrt(d_head) + mask) V over num_heads heads, then an output projection.

  FProp(query, memory=None, memory_paddings=None): self-attention when memory is None. memory_paddings [B, S]
  is 1.0 at padded memory positions, which get no attention. `causal` masks future positions (self-attention).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Depth of queries, keys, values and output.')
    p.Define('num_heads', 1, 'Number of heads; must divide input_dim.')
    p.Define('causal', False, 'Mask attention to future positions (decoder self-attention).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.input_dim <= 0 or p.num_heads <= 0 or p.input_dim % p.num_heads:
      raise errors.ConfigError('Layer %s: num_heads (%d) must divide input_dim (%d), both positive.' % (
          self.path, p.num_heads, p.input_dim))
    for name in ('wq', 'wk', 'wv', 'wo'):
      self.CreateVariable(name, weight_init.WeightParams([p.input_dim, p.input_dim]))

  def _Heads(self, x):
    b, t = tf.shape(x)[0], tf.shape(x)[1]
    p = self.params
    return tf.transpose(tf.reshape(x, [b, t, p.num_heads, p.input_dim // p.num_heads]), [0, 2, 1, 3])

  def FProp(self, query, memory=None, memory_paddings=None):
    p = self.params
    self.CheckInputShape(query, rank=3, last_dim=p.input_dim, arg='query')
    memory = query if memory is None else memory
    self.CheckInputShape(memory, rank=3, last_dim=p.input_dim, arg='memory')
    q = self._Heads(tf.einsum('btd,de->bte', query, self.wq)) / math.sqrt(p.input_dim // p.num_heads)
    k = self._Heads(tf.einsum('btd,de->bte', memory, self.wk))
    v = self._Heads(tf.einsum('btd,de->bte', memory, self.wv))
    logits = tf.einsum('bhtd,bhsd->bhts', q, k)
    big_negative = tf.constant(-1e9 if logits.dtype == tf.float32 else -1e30, logits.dtype)
    if memory_paddings is not None:
      logits += tf.cast(memory_paddings, logits.dtype)[:, None, None, :] * big_negative
    if p.causal:
      t, s = tf.shape(logits)[2], tf.shape(logits)[3]
      future = 1.0 - tf.linalg.band_part(tf.ones([t, s], logits.dtype), -1, 0)
      logits += future * big_negative
    context = tf.einsum('bhts,bhsd->bhtd', tf.nn.softmax(logits), v)
    b, t = tf.shape(query)[0], tf.shape(query)[1]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [b, t, p.input_dim])
    return tf.einsum('btd,de->bte', context, self.wo)

  @classmethod
  def FPropMeta(cls, params, query_shape, memory_shape=None):
    query_shape = tf.TensorShape(query_shape)
    memory_shape = tf.TensorShape(memory_shape) if memory_shape is not None else query_shape
    b, t, d = query_shape.as_list()
    s = memory_shape[1]
    flops = 2 * (b or 0) * d * d * (2 * t + 2 * s) + 4 * (b or 0) * t * s * d
    return base_layer.Meta(query_shape, flops)
