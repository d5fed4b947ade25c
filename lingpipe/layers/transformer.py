"""Pre-layer-norm Transformer blocks on NestedMaps: TransformerLayer (encoder) and TransformerDecoderLayer.

Taking and returning NestedMap(x=[B, T, D], paddings=[B, T], ...) lets padding masks, and the decoder's view of
the encoder output, travel with the activations between pipeline cells; fields a block does not use pass through.
"""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import attention
from lingpipe.layers import dropout
from lingpipe.layers import layer_norm
from lingpipe.layers import linear


class TransformerLayer(base_layer.BaseLayer):
  """x + Attention(LN(x)), then + FFN(LN(.)); T(L, H, A) sizes: model_dim, hidden_dim (H), num_heads (A)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('model_dim', 0, 'Model depth D.')
    p.Define('hidden_dim', 0, 'Feed-forward hidden depth H.')
    p.Define('num_heads', 1, 'Attention heads A.')
    p.Define('causal', False, 'Causal self-attention (decoder or language model).')
    p.Define('residual_dropout', dropout.DropoutLayer.Params(), 'Dropout on each residual branch.')
    p.Define('activation', 'relu', 'Feed-forward activation.')
    p.Define('attention_dim', 0, 'Depth of attention (heads x per-head depth); 0 means model_dim.')
    p.Define('output_init_scale', 1.0, 'Scales the initializer of the residual branches\' output projections '
             '(GPipe\'s scaled initialization by depth, e.g. 1/sqrt(2 * num_layers)).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.model_dim <= 0 or p.hidden_dim <= 0:
      raise errors.ConfigError('Layer %s: model_dim and hidden_dim must be positive.' % self.path)
    self._CreateAttention('attention', p.causal)
    self.CreateChild('ffn_norm', layer_norm.LayerNormLayer.Params().Set(dim=p.model_dim))
    self.CreateChild('ffn_in', linear.ProjectionLayer.Params().Set(
        input_dim=p.model_dim, output_dim=p.hidden_dim, activation=p.activation))
    ffn_out = linear.ProjectionLayer.Params().Set(input_dim=p.hidden_dim, output_dim=p.model_dim)
    if p.output_init_scale != 1.0:
      ffn_out.params_init = p.params_init.Copy().Set(scale=p.params_init.scale * p.output_init_scale)
    self.CreateChild('ffn_out', ffn_out)
    self.CreateChild('dropout', p.residual_dropout)

  def _CreateAttention(self, name, causal):
    p = self.params
    self.CreateChild(name + '_norm', layer_norm.LayerNormLayer.Params().Set(dim=p.model_dim))
    self.CreateChild(name, attention.MultiHeadAttention.Params().Set(
        input_dim=p.model_dim, hidden_dim=p.attention_dim, num_heads=p.num_heads, causal=causal,
        output_init_scale=p.output_init_scale))

  def _CheckInputs(self, inputs, fields):
    if not isinstance(inputs, dict) or any(f not in inputs for f in fields):
      raise errors.ShapeError('Layer %s (%s): inputs must be a NestedMap with fields %s, got %s.' % (
          self.path, type(self).__name__, ', '.join(fields), type(inputs).__name__ if not isinstance(
              inputs, dict) else 'fields ' + ', '.join(sorted(inputs))))

  def _FeedForward(self, x):
    return x + self.dropout.FProp(self.ffn_out.FProp(self.ffn_in.FProp(self.ffn_norm.FProp(x))))

  def FProp(self, inputs):
    self._CheckInputs(inputs, ('x', 'paddings'))
    x, paddings = self.ToFProp(inputs['x']), inputs['paddings']
    h = self.attention.FProp(self.attention_norm.FProp(x), memory_paddings=paddings)
    x = self._FeedForward(x + self.dropout.FProp(h))
    x *= 1.0 - tf.cast(paddings, x.dtype)[..., None]  # Padded positions stay zero.
    out = NestedMap(inputs)
    out['x'] = x
    return out

  @classmethod
  def FPropMeta(cls, params, input_shapes):
    x = tf.TensorShape(input_shapes['x'])
    rows = x[:-1].num_elements() or 0
    att = attention.MultiHeadAttention.FPropMeta(attention.MultiHeadAttention.Params().Set(
        input_dim=params.model_dim, hidden_dim=params.attention_dim, num_heads=params.num_heads), x)
    flops = att.flops + 4 * rows * params.model_dim * params.hidden_dim + 20 * rows * params.model_dim
    return base_layer.Meta(NestedMap(input_shapes), flops)


class TransformerDecoderLayer(TransformerLayer):
  """Causal self-attention, attention over the encoder output, feed-forward; each pre-layer-norm and residual.

  FProp(NestedMap(x, paddings, encoded=[B, S, D], encoded_paddings=[B, S], ...)). For decoding one position at a
  time: `InitState(encoded, encoded_paddings, max_len)` and `ExtendStep(x_t, state, t)`, which keeps the keys and
  values of earlier positions (and the projected encoder output) instead of re-computing them.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.causal = True
    return p

  def __init__(self, params):
    super().__init__(params)
    if not self.params.causal:
      raise errors.ConfigError('Layer %s: a TransformerDecoderLayer must be causal.' % self.path)
    self._CreateAttention('cross_attention', False)

  def FProp(self, inputs):
    self._CheckInputs(inputs, ('x', 'paddings', 'encoded', 'encoded_paddings'))
    x, paddings = self.ToFProp(inputs['x']), inputs['paddings']
    h = self.attention.FProp(self.attention_norm.FProp(x))
    x = x + self.dropout.FProp(h)
    h = self.cross_attention.FProp(self.cross_attention_norm.FProp(x), inputs['encoded'],
                                   inputs['encoded_paddings'])
    x = self._FeedForward(x + self.dropout.FProp(h))
    x *= 1.0 - tf.cast(paddings, x.dtype)[..., None]
    out = NestedMap(inputs)
    out['x'] = x
    return out

  def InitState(self, encoded, encoded_paddings, max_len):
    return NestedMap(self_cache=self.attention.InitCache(tf.shape(encoded)[0], max_len),
                     memory=self.cross_attention.ProjectMemory(encoded), encoded_paddings=encoded_paddings)

  def ExtendStep(self, x, state, t):
    """(output [B, 1, D], new state) for the position-t input x [B, 1, D]."""
    h, cache = self.attention.ExtendStep(self.attention_norm.FProp(x), state.self_cache, t)
    x = x + self.dropout.FProp(h)
    h = self.cross_attention.CrossStep(self.cross_attention_norm.FProp(x), state.memory, state.encoded_paddings)
    x = self._FeedForward(x + self.dropout.FProp(h))
    return x, NestedMap(state, self_cache=cache)

  @classmethod
  def FPropMeta(cls, params, input_shapes):
    meta = super().FPropMeta(params, input_shapes)
    x = tf.TensorShape(input_shapes['x'])
    cross = attention.MultiHeadAttention.FPropMeta(attention.MultiHeadAttention.Params().Set(
        input_dim=params.model_dim, hidden_dim=params.attention_dim, num_heads=params.num_heads), x,
                                                   tf.TensorShape(input_shapes['encoded']))
    return base_layer.Meta(meta.out_shapes[0], meta.flops + cross.flops)
