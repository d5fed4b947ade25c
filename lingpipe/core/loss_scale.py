"""Dynamic loss scaling, for training in float16: small gradients would underflow float16's range.

The loss is multiplied by `scale` before the backward pass and the gradients divided by it after, so the
float16 activations' gradients stay representable. A step whose gradients are not finite (the scale was too
large) is skipped: the scale halves and the step is counted. After `growth_steps` finite steps in a row the scale
doubles. The state (scale, finite steps in a row, skipped steps in all and in a row) is variables, so a checkpoint
keeps it and a resumed run goes on with the scale it had. bfloat16 has float32's range and needs none of this.
"""

import tensorflow as tf

from lingpipe.core import hyperparams
from lingpipe.core import param_checks

MODES = ('auto', 'dynamic', 'none')


def Params():
  """Params of loss scaling (task.train.loss_scaling)."""
  p = hyperparams.Params()
  p.Define('mode', 'auto', "'dynamic': scale the loss (see lingpipe/core/loss_scale.py); 'none'; 'auto': dynamic "
           'when a layer of the task computes in float16.', check=param_checks.OneOf(*MODES))
  p.Define('initial_scale', 2.0**15, 'The scale of the first step.', check=param_checks.Positive())
  p.Define('growth_steps', 2000, 'Finite steps in a row after which the scale doubles.',
           check=param_checks.Int(1))
  p.Define('max_skipped_in_a_row', 20, 'Stop training (naming the last good checkpoint) after this many skipped '
           'steps in a row: the gradients are not finite at any scale.', check=param_checks.Int(1))
  return p


def Wanted(params, task):
  """Whether `task` (a built BaseTask) trains with a loss scale under loss scaling Params `params`."""
  if params.mode == 'auto':
    return any(layer.fprop_dtype == tf.float16 for layer in task.Walk())
  return params.mode == 'dynamic'


class DynamicLossScale(tf.Module):
  """The loss scale's state and its update rule (see the module docstring)."""

  def __init__(self, params):
    super().__init__(name='loss_scale')
    self.params = params
    self.scale = tf.Variable(float(params.initial_scale), trainable=False, name='scale')
    self.finite_in_a_row = tf.Variable(0, dtype=tf.int64, trainable=False, name='finite_in_a_row')
    self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name='skipped')
    self.skipped_in_a_row = tf.Variable(0, dtype=tf.int64, trainable=False, name='skipped_in_a_row')

  def Unscale(self, grads, scale):
    """The gradients of the loss scaled by `scale` (the scale's value the step read) divided back (None stays
    None)."""
    inverse = 1.0 / scale
    return [None if g is None else g * tf.cast(inverse, g.dtype) for g in grads]

  def Update(self, is_finite):
    """Moves the state after a step whose gradients were `is_finite` (a bool tensor); returns the update op."""
    growth = tf.constant(self.params.growth_steps, tf.int64)

    def Finite():
      grown = self.finite_in_a_row + 1 >= growth
      return tf.group(
          self.scale.assign(tf.where(grown, self.scale * 2.0, self.scale)),
          self.finite_in_a_row.assign(tf.where(grown, tf.constant(0, tf.int64), self.finite_in_a_row + 1)),
          self.skipped_in_a_row.assign(0))

    def Skipped():
      return tf.group(self.scale.assign(tf.maximum(self.scale * 0.5, 1.0)), self.finite_in_a_row.assign(0),
                      self.skipped.assign_add(1), self.skipped_in_a_row.assign_add(1))

    return tf.cond(is_finite, Finite, Skipped)
