"""SequenceTagger: token and position embeddings -> a network on NestedMap(x, paddings) -> per-token softmax."""

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import serving
from lingpipe.core.nested_map import NestedMap
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import embedding
from lingpipe.layers import softmax
from lingpipe.layers import transformer
from lingpipe.model import base_task


class SequenceTagger(base_task.BaseTask):
  """Labels every real (non-padded) position of batch.ids; the loss and accuracy ignore padded positions."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('vocab_size', 0, 'Input vocabulary size.')
    p.Define('max_len', 0, 'Longest sequence (size of the position embedding).')
    p.Define('model_dim', 0, 'Embedding depth.')
    p.Define('network', None, 'Layer Params on NestedMap(x=[B, T, model_dim], paddings=[B, T]).')
    p.Define('softmax', softmax.SoftmaxLayer.Params(), 'Per-token softmax (input_dim = model_dim).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.network is None or p.vocab_size <= 0 or p.max_len <= 0 or p.model_dim <= 0:
      raise errors.ConfigError('SequenceTagger %s: set network, vocab_size, max_len and model_dim.' % self.path)
    self.CreateChild('token_emb', embedding.EmbeddingLayer.Params().Set(
        vocab_size=p.vocab_size, embedding_dim=p.model_dim, scale_sqrt_depth=True))
    self.CreateChild('position_emb', embedding.EmbeddingLayer.Params().Set(
        vocab_size=p.max_len, embedding_dim=p.model_dim))
    self.CreateChild('network', p.network)
    self.CreateChild('softmax', p.softmax)

  def ComputePredictions(self, batch):
    return self.PredictionsFromPipeline(self.network.FProp(self.PipelineInputs(batch)), batch)

  def PipelineInputs(self, batch):
    """The embedded tokens: embeddings run before the pipeline (their gradients come back through its input)."""
    ids, paddings = batch.ids, tf.cast(batch.paddings, self.params.dtype)
    positions = tf.range(tf.shape(ids)[1])
    x = self.token_emb.FProp(ids) + self.position_emb.FProp(positions)[None]
    x *= 1.0 - tf.cast(paddings, x.dtype)[..., None]
    return NestedMap(x=x, paddings=paddings)

  def PredictionsFromPipeline(self, outputs, batch):
    del batch  # Unused: the paddings travel through the pipeline.
    return NestedMap(logits=self.softmax.Logits(outputs.x), paddings=outputs.paddings)

  def ComputeLoss(self, batch, predictions):
    weights = 1.0 - predictions.paddings
    labels = tf.cast(batch.labels, tf.int32)
    out = self.softmax.XentLoss(predictions.logits, labels, weights)
    correct = tf.cast(tf.equal(tf.argmax(predictions.logits, -1, output_type=tf.int32), labels), weights.dtype)
    tokens = tf.reduce_sum(weights)
    accuracy = tf.reduce_sum(correct * weights) / tf.maximum(tokens, 1.0)
    return out.avg_xent, {'loss': (out.avg_xent, tokens), 'accuracy': (accuracy, tokens)}

  def Inference(self):
    spec = NestedMap(ids=tf.TensorSpec([None, None], tf.int32, name='ids'),
                     paddings=tf.TensorSpec([None, None], tf.float32, name='paddings'))

    def Serve(ids, paddings):
      p = self.params
      checks = [
          serving.Require(tf.reduce_all(tf.equal(tf.shape(ids), tf.shape(paddings))), 'Inputs `ids` and '
                          '`paddings` must have the same shape [batch, time]; got', tf.shape(ids), tf.shape(paddings)),
          serving.Require(tf.shape(ids)[1] <= p.max_len, 'Input `ids` must have at most %d positions; got' %
                          p.max_len, tf.shape(ids)[1]),
          serving.Require(tf.reduce_all((ids >= 0) & (ids < p.vocab_size)), 'Input `ids` must be token ids in '
                          '[0, %d); got values from' % p.vocab_size, tf.reduce_min(ids), 'to', tf.reduce_max(ids))]
      ids, paddings = serving.After(checks, ids, paddings)
      out = self.ComputePredictions(NestedMap(ids=ids, paddings=paddings))
      probs = tf.nn.softmax(out.logits)
      return {'probs': probs, 'labels': tf.argmax(probs, -1, output_type=tf.int32)}

    return {'serving_default': (Serve, spec)}


class TransformerTagger(SequenceTagger):
  """A SequenceTagger whose network is a stack of equal Transformer layers, its depth a plain Param (as
  DenseStackClassifier's), so the capacity benchmark can bisect on `task.num_layers`."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('num_layers', 2, 'Transformer layers in the stack.')
    p.Define('hidden_dim', 2048, 'Feed-forward width of every layer.')
    p.Define('num_heads', 8, 'Attention heads of every layer.')
    p.network = pipelining_layer.PipeliningLayer.Params()
    return p

  def __init__(self, params):
    p = params.Copy()
    if p.num_layers < 1 or p.hidden_dim < 1 or p.num_heads < 1:
      raise errors.ConfigError('TransformerTagger %s: num_layers, hidden_dim and num_heads must be >= 1, got %d, '
                               '%d and %d.' % (p.name, p.num_layers, p.hidden_dim, p.num_heads))
    layer = transformer.TransformerLayer.Params().Set(model_dim=p.model_dim, hidden_dim=p.hidden_dim,
                                                      num_heads=p.num_heads)
    p.network = p.network.Copy().Set(name='network', cell_tpl=[], layers=[layer.Copy() for _ in range(p.num_layers)])
    p.softmax.input_dim = p.model_dim
    super().__init__(p)
