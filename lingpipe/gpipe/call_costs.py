"""What a pipeline's cell calls cost on this machine beyond its layers' times, measured with a real
pipeline of a dense stack: the planner's step_time.Terms split_backward and per_action
(planner/step_time.py says how a step prediction uses them)."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import weight_init
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe.planner import layer_times


class _Dense(base_layer.BaseLayer):
  """relu(x W): the layer the call terms are measured with (gpipe builds on core alone, not on lingpipe/layers)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('dim', 0, 'Depth of the input and output.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', weight_init.WeightParams([params.dim, params.dim]))

  def FProp(self, inputs):
    return tf.nn.relu(tf.matmul(self.ToFProp(inputs), self.theta.w))

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta(input_shape, 2 * input_shape[0] * params.dim * params.dim)


def Measure(width=512, layers=4, batch=512):
  """(split_backward, per_action) measured with a real pipeline of a dense stack on one device: zero
  bubble's step over 1F1B's at M=1 less one, and what each extra cell call of 1F1B at M=8 costs
  beyond the layers' times at the micro-batch's size."""
  stack = [_Dense.Params().Set(name='l%d' % i, dim=width) for i in range(layers)]
  inputs = tf.random.normal([batch, width], seed=2)

  def Step(num_micro, schedule):
    pipe = pipelining_layer.PipeliningLayer.Params().Set(
        name='speed_terms', layers=[p.Copy() for p in stack], num_splits=1, num_micro_batches=num_micro,
        remat='never', schedule=schedule).Instantiate()

    def Loss(outputs, unused_targets):
      loss = tf.reduce_mean(tf.square(outputs))
      return loss, {'loss': (loss, 1.0)}

    @tf.function(autograph=False)
    def Run():
      with tf.GradientTape() as tape, context.Training(True):
        loss, _ = pipe.FPropWithLoss(inputs, inputs, Loss)
      return tape.gradient(loss, pipe.trainable_variables)
    return layer_times.Best(Run, 5)

  one, zero_bubble, eight = Step(1, '1f1b'), Step(1, 'zero_bubble'), Step(8, '1f1b')
  built = {}
  whole = layer_times.Measure(stack, [batch, width], batch, built=built)
  micro = layer_times.Measure(stack, [batch, width], batch // 8, built=built)
  work = lambda t, m: m * (sum(t.forward) + sum(t.backward))
  # The calls one M=1 step and one M=8 step make: a forward and a backward per micro-batch.
  per_action = ((eight - work(micro, 8)) - (one - work(whole, 1))) / (2 * 8 - 2)
  return max(0.0, zero_bubble / one - 1.0), max(0.0, per_action)
