"""Multi-head dot-product attention over [batch, time, dim] sequences with padding masks."""

import math

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core import weight_init
from lingpipe.core.nested_map import NestedMap


class MultiHeadAttention(base_layer.BaseLayer):
  """softmax(Q K^T / sqrt(d_head) + mask) V over num_heads heads, then an output projection.

  FProp(query, memory=None, memory_paddings=None): self-attention when memory is None. memory_paddings [B, S]
  is 1.0 at padded memory positions, which get no attention. `causal` masks future positions (self-attention).

  Incremental decoding: `ProjectMemory(memory)` gives the keys and values of a fixed memory once (cross-attention);
  `InitCache(batch, max_len)` and `ExtendStep(query_t, cache, t)` attend one new position to itself and all earlier
  ones, keeping their keys and values in the cache (causal self-attention without re-computing the prefix).

  Everything runs in the compute dtype but a float16 model's logits, masks and softmax, which run in the variables'
  dtype (float32): float16 logits overflow. bfloat16 has float32's range, and its probabilities take half the
  memory (at long sequences the largest tensors a Transformer keeps).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Depth of queries, keys, values and output.')
    p.Define('num_heads', 1, 'Number of heads; must divide input_dim.')
    p.Define('hidden_dim', 0, 'Depth of the attention (num_heads x per-head depth); 0 means input_dim.')
    p.Define('causal', False, 'Mask attention to future positions (decoder self-attention).')
    p.Define('output_init_scale', 1.0, 'Multiplies the scale of the output projection\'s initializer (GPipe\'s '
             'scaled initialization by depth).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    hidden = p.hidden_dim or p.input_dim
    if p.input_dim <= 0 or p.num_heads <= 0 or hidden % p.num_heads:
      raise errors.ConfigError('Layer %s: num_heads (%d) must divide the attention depth (%d), both positive.' % (
          self.path, p.num_heads, hidden))
    for name in ('wq', 'wk', 'wv'):
      self.CreateVariable(name, weight_init.WeightParams([p.input_dim, hidden]))
    out_init = None
    if p.output_init_scale != 1.0:
      out_init = p.params_init.Copy().Set(scale=p.params_init.scale * p.output_init_scale)
    self.CreateVariable('wo', weight_init.WeightParams([hidden, p.input_dim], out_init))

  @property
  def _head_dim(self):
    p = self.params
    return (p.hidden_dim or p.input_dim) // p.num_heads

  def _Heads(self, x, w):
    """[B, T, D] -> projected [B, heads, T, head_dim]."""
    x = tf.einsum('btd,de->bte', self.ToFProp(x), w)
    b, t = tf.shape(x)[0], tf.shape(x)[1]
    return tf.transpose(tf.reshape(x, [b, t, self.params.num_heads, self._head_dim]), [0, 2, 1, 3])

  def _Attend(self, query, k, v, bias):
    """Output [B, T, D] of queries [B, T, D] over heads k, v [B, H, S, d]; bias [B or 1, 1, T or 1, S] in
    _LogitDtype."""
    theta = self.theta
    q = self._Heads(query, theta.wq) / math.sqrt(self._head_dim)
    logits = tf.cast(tf.einsum('bhtd,bhsd->bhts', q, k), self._LogitDtype()) + bias
    probs = tf.cast(tf.nn.softmax(logits), v.dtype)
    context = tf.einsum('bhts,bhsd->bhtd', probs, v)
    b, t = tf.shape(query)[0], tf.shape(query)[1]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [b, t, self._head_dim * self.params.num_heads])
    return tf.einsum('bte,ed->btd', context, theta.wo)

  def _LogitDtype(self):
    return self.params.dtype if self.fprop_dtype == tf.float16 else self.fprop_dtype

  def _BigNegative(self):
    dtype = self._LogitDtype()
    return tf.constant(-1e9 if dtype == tf.float32 else -1e30, dtype)

  def FProp(self, query, memory=None, memory_paddings=None):
    p = self.params
    self.CheckInputShape(query, rank=3, last_dim=p.input_dim, arg='query')
    memory = query if memory is None else memory
    self.CheckInputShape(memory, rank=3, last_dim=p.input_dim, arg='memory')
    theta = self.theta
    k, v = self._Heads(memory, theta.wk), self._Heads(memory, theta.wv)
    bias = tf.zeros([1, 1, 1, 1], self._LogitDtype())
    if memory_paddings is not None:
      bias += tf.cast(memory_paddings, self._LogitDtype())[:, None, None, :] * self._BigNegative()
    if p.causal:
      t, s = tf.shape(query)[1], tf.shape(memory)[1]
      future = 1.0 - tf.linalg.band_part(tf.ones([t, s], self._LogitDtype()), -1, 0)
      bias += future[None, None] * self._BigNegative()
    return self._Attend(query, k, v, bias)

  def ProjectMemory(self, memory):
    """NestedMap(k, v) of a fixed memory [B, S, D], for CrossStep."""
    theta = self.theta
    return NestedMap(k=self._Heads(memory, theta.wk), v=self._Heads(memory, theta.wv))

  def CrossStep(self, query, projected, memory_paddings):
    """Attention of query [B, 1, D] over a memory projected by ProjectMemory."""
    bias = tf.cast(memory_paddings, self._LogitDtype())[:, None, None, :] * self._BigNegative()
    return self._Attend(query, projected.k, projected.v, bias)

  def InitCache(self, batch, max_len):
    """Empty keys and values of max_len positions, in the compute dtype."""
    shape = [batch, self.params.num_heads, max_len, self._head_dim]
    return NestedMap(k=tf.zeros(shape, self.fprop_dtype), v=tf.zeros(shape, self.fprop_dtype))

  def ExtendStep(self, query, cache, t):
    """Self-attention of the position t query [B, 1, D] over positions 0..t; returns (output, updated cache)."""
    theta = self.theta
    at_t = tf.one_hot(t, tf.shape(cache.k)[2], dtype=cache.k.dtype)[None, None, :, None]
    cache = NestedMap(k=cache.k + at_t * self._Heads(query, theta.wk), v=cache.v + at_t * self._Heads(query, theta.wv))
    later = tf.cast(tf.range(tf.shape(cache.k)[2]) > t, self._LogitDtype())
    return self._Attend(query, cache.k, cache.v, later[None, None, None, :] * self._BigNegative()), cache

  @classmethod
  def FPropMeta(cls, params, query_shape, memory_shape=None):
    query_shape = tf.TensorShape(query_shape)
    memory_shape = tf.TensorShape(memory_shape) if memory_shape is not None else query_shape
    b, t, d = query_shape.as_list()
    s = memory_shape[1]
    e = params.hidden_dim or d
    flops = 2 * (b or 0) * d * e * (2 * t + 2 * s) + 4 * (b or 0) * t * s * e
    return base_layer.Meta(query_shape, flops)
