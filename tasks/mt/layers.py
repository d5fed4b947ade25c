"""The pieces of an encoder-decoder Transformer written as one flat sequence of layers, for PipeliningLayer.

    MtEmbeddingLayer -> TransformerLayer x L -> EncoderToDecoderLayer -> TransformerDecoderLayer x L -> MtSoftmaxLayer

Every layer takes and returns a NestedMap. The embedding (first cell) embeds source and target with one shared
table; the target embeddings ride through the encoder cells as the field `tgt_x`; the bridge swaps them in and
keeps the normalized encoder output as `encoded` for the decoder's cross-attention; the softmax (last cell)
returns per-token cross-entropy, so [B, T, vocab] logits never cross a cell boundary.
"""

import math

import numpy as np
import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import dropout
from lingpipe.layers import embedding
from lingpipe.layers import layer_norm
from lingpipe.layers import softmax


def PositionalEncoding(positions, dim, dtype=tf.float32):
  """Sinusoidal encodings [..., dim] of integer positions (sin on the first half of the depth, cos on the rest)."""
  half = dim // 2
  inv_freq = np.exp(-math.log(10000.0) * np.arange(half) / max(half - 1, 1)).astype(np.float32)
  angles = tf.cast(positions, tf.float32)[..., None] * inv_freq
  enc = tf.concat([tf.sin(angles), tf.cos(angles)], -1)
  if dim % 2:
    enc = tf.pad(enc, [[0, 0]] * (enc.shape.rank - 1) + [[0, 1]])
  return tf.cast(enc, dtype)


def _Mask(x, paddings):
  return x * (1.0 - tf.cast(paddings, x.dtype))[..., None]


class MtEmbeddingLayer(base_layer.BaseLayer):
  """NestedMap(src_ids, src_paddings, tgt_ids, tgt_paddings, tgt_labels) -> NestedMap(x, paddings, tgt_x,
  tgt_paddings, tgt_labels): shared embeddings scaled by sqrt(model_dim), plus sinusoidal positions, dropout."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('vocab_size', 0, 'Shared source and target vocabulary size.')
    p.Define('model_dim', 0, 'Model depth D.')
    p.Define('dropout', dropout.DropoutLayer.Params(), 'Dropout on the embeddings.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateChild('emb', embedding.EmbeddingLayer.Params().Set(
        vocab_size=p.vocab_size, embedding_dim=p.model_dim, scale_sqrt_depth=True))
    self.CreateChild('dropout', p.dropout)

  def Embed(self, ids, positions):
    return self.dropout.FProp(self.emb.FProp(ids) + PositionalEncoding(positions, self.params.model_dim,
                                                                          self.fprop_dtype))

  def EmbedSequence(self, ids, paddings):
    """[B, T, D] embeddings of ids [B, T] at positions 0..T-1, zero at padded positions."""
    return _Mask(self.Embed(ids, tf.range(tf.shape(ids)[1])), paddings)

  def FProp(self, inputs):
    for field in ('src_ids', 'src_paddings', 'tgt_ids', 'tgt_paddings', 'tgt_labels'):
      if field not in inputs:
        raise errors.ShapeError('Layer %s (MtEmbeddingLayer): the input has no field %r (fields: %s).' % (
            self.path, field, ', '.join(sorted(inputs))))
    src = self.EmbedSequence(inputs.src_ids, inputs.src_paddings)
    tgt = self.EmbedSequence(inputs.tgt_ids, inputs.tgt_paddings)
    return NestedMap(x=src, paddings=inputs.src_paddings, tgt_x=tgt, tgt_paddings=inputs.tgt_paddings,
                     tgt_labels=inputs.tgt_labels)

  def EmbedStep(self, ids, t):
    """[B, 1, D] embedding of the position-t tokens ids [B] (decoding)."""
    return self.Embed(ids[:, None], tf.reshape(t, [1]))

  @classmethod
  def FPropMeta(cls, params, input_shapes):
    src, tgt = tf.TensorShape(input_shapes['src_ids']), tf.TensorShape(input_shapes['tgt_ids'])
    d = params.model_dim
    out = NestedMap(x=src.concatenate([d]), paddings=src, tgt_x=tgt.concatenate([d]), tgt_paddings=tgt,
                    tgt_labels=tgt)
    return base_layer.Meta(out, 3 * ((src.num_elements() or 0) + (tgt.num_elements() or 0)) * d)


class EncoderToDecoderLayer(base_layer.BaseLayer):
  """Normalizes the encoder output into `encoded`/`encoded_paddings` and makes the target embeddings `x`."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('model_dim', 0, 'Model depth D.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('final_norm', layer_norm.LayerNormLayer.Params().Set(dim=self.params.model_dim))

  def Encoded(self, x, paddings):
    """The encoder's final (normalized) output."""
    return _Mask(self.final_norm.FProp(x), paddings)

  def FProp(self, inputs):
    return NestedMap(x=inputs.tgt_x, paddings=inputs.tgt_paddings, encoded=self.Encoded(inputs.x, inputs.paddings),
                     encoded_paddings=inputs.paddings, tgt_labels=inputs.tgt_labels)

  @classmethod
  def FPropMeta(cls, params, input_shapes):
    out = NestedMap(x=input_shapes['tgt_x'], paddings=input_shapes['tgt_paddings'], encoded=input_shapes['x'],
                    encoded_paddings=input_shapes['paddings'], tgt_labels=input_shapes['tgt_labels'])
    return base_layer.Meta(out, 8 * (tf.TensorShape(input_shapes['x']).num_elements() or 0))


class MtSoftmaxLayer(base_layer.BaseLayer):
  """Final layer norm and softmax: NestedMap(x, tgt_labels, ...) -> NestedMap(xent=[B, T], correct=[B, T])."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('model_dim', 0, 'Model depth D.')
    p.Define('vocab_size', 0, 'Output vocabulary size.')
    p.Define('softmax', softmax.SoftmaxLayer.Params(), 'Softmax Params (logit clipping, label smoothing); '
             'input_dim and num_classes are set from model_dim and vocab_size.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    self.CreateChild('final_norm', layer_norm.LayerNormLayer.Params().Set(dim=p.model_dim))
    self.CreateChild('softmax', p.softmax.Copy().Set(input_dim=p.model_dim, num_classes=p.vocab_size))

  def Logits(self, x):
    return self.softmax.Logits(self.final_norm.FProp(x))

  def FProp(self, inputs):
    labels = tf.cast(inputs.tgt_labels, tf.int32)
    out = self.softmax.XentLoss(self.Logits(inputs.x), labels)
    correct = tf.cast(tf.equal(tf.argmax(out.logits, -1, output_type=tf.int32), labels), out.per_example_xent.dtype)
    return NestedMap(xent=out.per_example_xent, correct=tf.stop_gradient(correct))

  @classmethod
  def FPropMeta(cls, params, input_shapes):
    x = tf.TensorShape(input_shapes['x'])
    rows = x[:-1].num_elements() or 0
    return base_layer.Meta(NestedMap(xent=x[:-1], correct=x[:-1]), 2 * rows * params.model_dim * params.vocab_size)
