"""SoftmaxLayer: logits with optional clipping, and cross-entropy with optional label smoothing.

The projection runs in the compute dtype; logits, softmax and cross-entropy in the variables' dtype (float32)."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core import weight_init
from lingpipe.core.nested_map import NestedMap


class SoftmaxLayer(base_layer.BaseLayer):
  """A projection to num_classes logits, clipped to [-logits_abs_max, logits_abs_max] when set."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Depth of the input.')
    p.Define('num_classes', 0, 'Number of classes.')
    p.Define('logits_abs_max', None, 'If set, logits are clipped to this absolute value (GPipe\'s stabilizer).')
    p.Define('label_smoothing', 0.0, 'Mass spread uniformly over all classes in the target distribution.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.input_dim <= 0 or p.num_classes <= 1:
      raise errors.ConfigError('Layer %s: need input_dim > 0 and num_classes > 1, got %d and %d.' % (
          self.path, p.input_dim, p.num_classes))
    if not 0.0 <= p.label_smoothing < 1.0:
      raise errors.ConfigError('Layer %s: label_smoothing must be in [0, 1), got %r.' % (
          self.path, p.label_smoothing))
    self.CreateVariable('w', weight_init.WeightParams([p.input_dim, p.num_classes]))
    self.CreateVariable('b', weight_init.WeightParams([p.num_classes], weight_init.WeightInit.Constant()),
                        keep_dtype=True)

  def Logits(self, inputs):
    p = self.params
    self.CheckInputShape(inputs, min_rank=1, last_dim=p.input_dim)
    inputs, theta = self.ToFProp(inputs), self.theta
    logits = tf.cast(tf.tensordot(inputs, theta.w, axes=[[inputs.shape.rank - 1], [0]]), p.dtype) + theta.b
    if p.logits_abs_max is not None:
      logits = tf.clip_by_value(logits, -p.logits_abs_max, p.logits_abs_max)
    return logits

  def XentLoss(self, logits, class_ids, class_weights=None):
    """NestedMap(logits, log_probs, per_example_xent, avg_xent, total_weight) of `logits` against class_ids.

    avg_xent is the class_weights-weighted mean of the per-example cross-entropy against the smoothed targets.
    """
    p = self.params
    log_probs = tf.nn.log_softmax(logits)
    targets = tf.one_hot(class_ids, p.num_classes, dtype=logits.dtype)
    if p.label_smoothing:
      targets = targets * (1.0 - p.label_smoothing) + p.label_smoothing / p.num_classes
    xent = -tf.reduce_sum(targets * log_probs, axis=-1)
    weights = tf.ones_like(xent) if class_weights is None else tf.cast(class_weights, xent.dtype)
    total = tf.reduce_sum(weights)
    return NestedMap(logits=logits, log_probs=log_probs, per_example_xent=xent, total_weight=total,
                     avg_xent=tf.reduce_sum(xent * weights) / tf.maximum(total, 1e-9))

  def FProp(self, inputs, class_ids=None, class_weights=None):
    """NestedMap(logits, log_probs), plus the XentLoss fields when class_ids are given."""
    logits = self.Logits(inputs)
    if class_ids is None:
      return NestedMap(logits=logits, log_probs=tf.nn.log_softmax(logits))
    return self.XentLoss(logits, class_ids, class_weights)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    rows = input_shape[:-1].num_elements() or 0
    return base_layer.Meta(input_shape[:-1].concatenate([params.num_classes]),
                           2 * rows * params.input_dim * params.num_classes + 5 * rows * params.num_classes)
