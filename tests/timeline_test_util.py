"""What the timeline tests share: a recorded training step, and its events by action."""

import tensorflow as tf

from lingpipe.core import context
from lingpipe.gpipe import timeline


def RecordedSteps(pipe, x, recorder):
  """(recorded step, plain step) tf.functions: loss and gradients (and the recorded rows)."""

  def Body(x):
    with tf.GradientTape() as tape:
      with context.Training(True):
        loss = tf.reduce_sum(tf.square(pipe.FProp(x)))
    return loss, tape.gradient(loss, pipe.trainable_variables)

  @tf.function(autograph=False)
  def Recorded(x):
    with timeline.Recording(recorder):
      result = Body(x)
      return result, recorder.Collect()

  return Recorded, tf.function(Body, autograph=False)


def RecordedLossStep(pipe, loss_fn, recorder, loss_inputs=lambda x: x):
  """A tf.function x -> (gradients, recorded rows): a training step of `pipe` through FPropWithLoss with
  loss_fn(outputs, loss_inputs(x)), recorded."""

  @tf.function(autograph=False)
  def Recorded(x):
    with timeline.Recording(recorder):
      with tf.GradientTape() as tape, context.Training(True):
        loss, _ = pipe.FPropWithLoss(x, loss_inputs(x), loss_fn)
      return tape.gradient(loss, pipe.trainable_variables), recorder.Collect()

  return Recorded


def ByAction(events):
  return {(e.kind, e.cell, e.micro_batch): e for e in events}


def EachStep(recorded, x, recorder, num_steps=16):
  """The events of `num_steps` recorded steps, each by action. A check of how the devices overlap needs one step
  that shows it: on a loaded machine the devices may run a step, or a few in a row, one after the other."""
  return [ByAction(recorder.Events(recorded(x)[1])) for _ in range(num_steps)]


def SquaredSum(out, unused_targets):
  loss = tf.reduce_sum(tf.square(out))
  return loss, {'loss': (loss, tf.ones([]))}
