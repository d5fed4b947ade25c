"""Re-materialization layer by layer (remat 'per_layer'): a layer whose backward re-computes its own forward.

A cell's forward under 'per_layer' keeps (as under 'never', for each micro-batch) what the cell's backward reads,
and each of its layers runs as `Recomputed`, whose gradient reads only the layer's input and parameter values:

    forward:   x1 = L1(x0); x2 = L2(x1); ...            kept: x0, x1, x2, ... (each layer's input)
    backward:  for layer i from last to first, once dy_i (the gradient of its output) exists:
                 re-compute L_i(x_i), take its gradients, free its activations, hand dx_i on

so a cell's backward holds one layer's activations instead of the whole cell's (Chen et al. 2016's checkpoints,
one per layer; Praxis runs `nn.remat` inside its scan of layers). remat.Backward orders the work: the
re-computation waits for dy_i, and dx_i for layer i's weight gradients, or the executor would re-compute every
layer as soon as it could. A layer is re-computed from its own weights: one that reads another layer's variable
(tied weights) is refused.
"""

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.gpipe.engine import layer_functions
from lingpipe.gpipe.engine import remat


def _Trainable(slot):
  """Whether a variable slot holds what the gradient is taken for: a value given for it, or a trainable variable."""
  return isinstance(slot, tf.Tensor) or (isinstance(slot, tf.Variable) and slot.trainable)


def Recomputed(layer, inputs, run):
  """run(inputs), `layer`'s forward (its FProp, or a call of its kind's function), whose gradient re-computes it.

  Args:
    layer: the layer `run` runs; its gradient is taken for the values of its trainable variables (those the caller
      gave, base_layer.VariablesAs: a cell's parameter values, else read here). Other variables (batch norm's
      moving averages) get none.
    inputs: the layer's input, a tensor or nested structure (leaves that are not tensors are passed as they are).
    run: inputs -> outputs, reading `layer`'s slots.

  Returns:
    run(inputs), whose backward re-computes `run` from the kept inputs and values once its output gradients exist.
  """
  slots = [(sub, name) for sub, name in layer_functions.Slots(layer) if _Trainable(getattr(sub, name))]
  # A variable read here, on the caller's tape, passes the gradient of its value on to the variable.
  values = [tf.convert_to_tensor(getattr(sub, name)) for sub, name in slots]
  flat = tf.nest.flatten(inputs)
  positions = [i for i, x in enumerate(flat) if isinstance(x, tf.Tensor)]
  snapshot = context.Snapshot()

  def Run(tensors, values):
    leaves = list(flat)
    for i, t in zip(positions, tensors):
      leaves[i] = t
    with layer_functions.ReadingAs(slots, values):
      return run(tf.nest.pack_sequence_as(inputs, leaves))

  @tf.custom_gradient
  def Layer(*args):
    tensors, given = list(args[:len(positions)]), list(args[len(positions):])
    outputs = Run(tensors, given)

    def Grad(*output_grads, variables=None):
      trainable = [v.name for v in variables or () if v.trainable]
      if trainable:
        raise errors.ConfigError("Layer %s reads trainable variables of other layers (%s): remat='per_layer' "
                                 're-computes a layer from its own weights; use another remat policy.' % (
                                     layer.path, ', '.join(trainable)))
      with remat.AsInForward(snapshot):
        input_grads, value_grads = remat.Backward(
            lambda xs: Run(xs, given), given, tensors, tf.nest.pack_sequence_as(outputs, list(output_grads)))
      return list(input_grads) + list(value_grads), [None] * len(variables or ())

    return outputs, Grad

  return Layer(*([flat[i] for i in positions] + values))
