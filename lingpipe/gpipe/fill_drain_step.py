"""GPipe's training step: the plan's forward phase, then, when the caller asks for gradients, its backward phase.

The schedules whose plans interleave forwards and backwards run through loss_step.FPropWithLoss instead.
"""

import tensorflow as tf

from lingpipe.core import context
from lingpipe.gpipe import executor
from lingpipe.gpipe import microbatch
from lingpipe.gpipe import phase_loop
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import remat
from lingpipe.gpipe import timeline


def TrainFProp(layer, inputs):
  """The outputs of PipeliningLayer `layer` in training under a fill-drain plan (GPipe): one custom gradient whose
  forward runs the plan's forward phase and whose gradient runs its backward phase (executor.py)."""
  p = layer.params
  flat_inputs = tf.nest.flatten(inputs)
  structure = {}
  # The backward runs when the caller asks for gradients, usually outside its StepSeed and Replica blocks:
  # re-enter them so the re-computation draws the forward's dropout masks.
  step_seed = context.StepSeedValue()
  # Inputs no tape watches (images, constant features) get no gradient: None, as for integer leaves.
  wanted = remat.WantedInputGrads(flat_inputs)

  @tf.custom_gradient
  def Pipeline(*args):
    outputs, forward = layer.Forward(tf.nest.pack_sequence_as(inputs, list(args)), True, wanted)
    r = layer.Replica()
    structure['outputs'] = outputs
    flat_outputs = tf.nest.flatten(outputs)

    def Grad(*dys, variables=None):
      with context.StepSeed(step_seed), context.Replica(r):
        return Backward(dys, variables)

    def Backward(dys, variables):
      devices = layer.ReplicaDevices(r)
      num_micro = forward.plan.num_micro_batches
      dy = tf.nest.pack_sequence_as(outputs, [
          phase_loop.Opaque(tf.zeros_like(o)) if g is None else g for g, o in zip(dys, flat_outputs)])
      recorder = timeline.Current()
      cells = layer.functions.ExecutorCells(r, forward.params, True, forward.padding, recorder is not None,
                                            forward.wanted)
      with tf.device(devices[-1]):
        dy_micro, _ = microbatch.Split(dy, num_micro, p.batch_dim, p.pad)
        looped = phase_loop.Loops(forward.plan, plan_lib.BACKWARD, layer.LoopPhases(r), cells.Saves(forward.plan))
        dy_stacked = microbatch.Stacked(dy, num_micro, p.batch_dim, forward.pad_rows) if looped else None
      first, accumulated = executor.Backward(forward.plan, cells, dy_micro, dy_stacked, forward.kept,
                                             recorder=recorder, name=layer.TimelineName(r),
                                             loop=layer.LoopPhases(r))
      by_ref = layer.GradientsByVariable(accumulated, r)
      return (layer.MergeInputGrads(first, r, forward.pad_rows),
              [by_ref.get(v.ref()) for v in (variables or [])])

    return flat_outputs, Grad

  flat_outputs = Pipeline(*flat_inputs)
  return tf.nest.pack_sequence_as(structure['outputs'], flat_outputs)
