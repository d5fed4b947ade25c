"""TransformerLayer: a pre-layer-norm self-attention + feed-forward block on NestedMap(x, paddings).

Taking and returning NestedMap(x=[B, T, D], paddings=[B, T]) lets the padding mask travel with the activations
between pipeline cells.
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
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.model_dim <= 0 or p.hidden_dim <= 0:
      raise errors.ConfigError('Layer %s: model_dim and hidden_dim must be positive.' % self.path)
    self.CreateChild('attention_norm', layer_norm.LayerNormLayer.Params().Set(dim=p.model_dim))
    self.CreateChild('attention', attention.MultiHeadAttention.Params().Set(
        input_dim=p.model_dim, num_heads=p.num_heads, causal=p.causal))
    self.CreateChild('ffn_norm', layer_norm.LayerNormLayer.Params().Set(dim=p.model_dim))
    self.CreateChild('ffn_in', linear.ProjectionLayer.Params().Set(
        input_dim=p.model_dim, output_dim=p.hidden_dim, activation=p.activation))
    self.CreateChild('ffn_out', linear.ProjectionLayer.Params().Set(input_dim=p.hidden_dim, output_dim=p.model_dim))
    self.CreateChild('dropout', p.residual_dropout)

  def FProp(self, inputs):
    if not isinstance(inputs, dict) or 'x' not in inputs or 'paddings' not in inputs:
      raise errors.ShapeError('Layer %s (TransformerLayer): inputs must be NestedMap(x=[B, T, D], paddings=[B, T]),'
                              ' got %s.' % (self.path, type(inputs).__name__))
    x, paddings = inputs['x'], inputs['paddings']
    h = self.attention.FProp(self.attention_norm.FProp(x), memory_paddings=paddings)
    x = x + self.dropout.FProp(h)
    h = self.ffn_out.FProp(self.ffn_in.FProp(self.ffn_norm.FProp(x)))
    x = x + self.dropout.FProp(h)
    x *= 1.0 - tf.cast(paddings, x.dtype)[..., None]  # Padded positions stay zero.
    out = NestedMap(inputs)
    out['x'] = x
    return out

  @classmethod
  def FPropMeta(cls, params, input_shapes):
    x = tf.TensorShape(input_shapes['x'])
    rows = x[:-1].num_elements() or 0
    att = attention.MultiHeadAttention.FPropMeta(attention.MultiHeadAttention.Params().Set(
        input_dim=params.model_dim, num_heads=params.num_heads), x)
    flops = att.flops + 4 * rows * params.model_dim * params.hidden_dim + 20 * rows * params.model_dim
    return base_layer.Meta(NestedMap(input_shapes), flops)
