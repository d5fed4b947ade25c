"""Dropout, optionally deterministic: the same seed and step always drop the same units.

The deterministic mode draws its mask with stateless random ops from (layer seed, layer path, step seed), so a
re-computation of the forward (re-materialization) drops exactly the units the first forward dropped.
"""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors


def MaskSeed(layer):
  """The stateless seed of `layer`'s random masks: from its random_seed and path, and the step seed (step,
  micro-batch, replica), so a re-computed forward draws the same masks."""
  return tf.stack([context.LayerSeed(layer), context.CurrentStepSeed()])


class DropoutLayer(base_layer.BaseLayer):
  """Zeroes each unit with probability 1 - keep_prob in training and scales the rest by 1 / keep_prob."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('keep_prob', 1.0, 'Probability of keeping a unit; 1.0 disables dropout.')
    p.Define('noise_shape_broadcast_dims', None, 'Dimensions along which one mask value is shared (list).')
    p.Define('deterministic', False, 'Draw masks from stateless ops seeded by (random_seed, path, step seed), '
             'so re-computation reproduces them.')
    return p

  def __init__(self, params):
    super().__init__(params)
    if not 0.0 < self.params.keep_prob <= 1.0:
      raise errors.ConfigError('Layer %s: keep_prob must be in (0, 1], got %r.' % (self.path,
                                                                                   self.params.keep_prob))

  def _NoiseShape(self, inputs):
    dims = self.params.noise_shape_broadcast_dims
    shape = tf.shape(inputs)
    if not dims:
      return shape
    return tf.stack([1 if i in dims or i - inputs.shape.rank in dims else shape[i]
                     for i in range(inputs.shape.rank)])

  def FProp(self, inputs):
    p = self.params
    if not context.IsTraining() or p.keep_prob == 1.0:
      return inputs
    noise_shape = self._NoiseShape(inputs)
    if p.deterministic:
      uniform = tf.random.stateless_uniform(noise_shape, seed=MaskSeed(self))
    else:
      uniform = tf.random.uniform(noise_shape)  # float32 in any compute dtype: bfloat16 draws would tie often.
    keep = tf.cast(uniform < p.keep_prob, inputs.dtype)
    return inputs * keep / tf.cast(p.keep_prob, inputs.dtype)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta(input_shape, 2 * (input_shape.num_elements() or 0))
