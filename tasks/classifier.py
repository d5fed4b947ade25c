"""Classifier: a task for inputs -> classes with any network and a softmax on top (vectors, images, ...)."""

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import softmax
from lingpipe.model import base_task


class Classifier(base_task.BaseTask):
  """batch.<input_key> -> network -> softmax over num_classes, trained on batch.<label_key>.

  Metrics: loss, accuracy (top-1) and top-k accuracy (k = min(5, num_classes)).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Depth of the input features (the last dimension).')
    p.Define('input_key', 'features', 'Field of the batch the network reads.')
    p.Define('label_key', 'labels', 'Field of the batch with the class ids.')
    p.Define('network', None, 'Layer Params mapping [B, input_dim] to [B, softmax.input_dim].')
    p.Define('softmax', softmax.SoftmaxLayer.Params(), 'SoftmaxLayer Params (input_dim, num_classes, label '
             'smoothing, logit clipping).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.network is None:
      raise errors.ConfigError('Classifier %s: task.network is not set; give it layer Params.' % self.path)
    if p.input_dim <= 0:
      raise errors.ConfigError('Classifier %s: task.input_dim must be positive, got %d.' % (self.path,
                                                                                        p.input_dim))
    self.CreateChild('network', p.network)
    self.CreateChild('softmax', p.softmax)

  def ComputePredictions(self, batch):
    return self.PredictionsFromPipeline(self.network.FProp(self.PipelineInputs(batch)), batch)

  def PipelineInputs(self, batch):
    """The features in the compute dtype: micro-batches are split and handed on in it."""
    return self.ToFProp(batch[self.params.input_key])

  def PredictionsFromPipeline(self, outputs, batch):
    del batch  # Unused.
    return NestedMap(logits=self.softmax.Logits(outputs))

  def ComputeLoss(self, batch, predictions):
    labels = tf.cast(batch[self.params.label_key], tf.int32)
    out = self.softmax.XentLoss(predictions.logits, labels)
    batch_size = tf.cast(tf.shape(labels)[0], tf.float32)
    correct = tf.cast(tf.equal(tf.argmax(out.logits, -1, output_type=tf.int32), labels), tf.float32)
    k = min(5, self.params.softmax.num_classes)
    in_top_k = tf.cast(tf.math.in_top_k(labels, out.logits, k), tf.float32)
    metrics = {'loss': (out.avg_xent, batch_size), 'accuracy': (tf.reduce_mean(correct), batch_size),
               'top%d_accuracy' % k: (tf.reduce_mean(in_top_k), batch_size)}
    return out.avg_xent, metrics

  def Inference(self):
    p = self.params
    spec = NestedMap(features=tf.TensorSpec([None, p.input_dim], tf.float32, name='features'))

    def Serve(features):
      out = self.ComputePredictions(NestedMap({p.input_key: features}))
      probs = tf.nn.softmax(out.logits)
      return {'probs': probs, 'class_ids': tf.argmax(probs, -1, output_type=tf.int32)}

    return {'serving_default': (Serve, spec)}
