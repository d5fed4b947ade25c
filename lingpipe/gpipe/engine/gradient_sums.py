"""A pipeline cell's weight gradients, summed over its micro-batches in place: one copy of the weights' size.

A sum carried as tensors through a cell's backward holds about twice the weights: a function call that is not
inlined (the re-computing backward, the pair TensorFlow builds for a call's gradient) keeps its arguments, the sum
so far, until it ends and hands back all its outputs, the new sum or the micro-batch's whole gradient, together at
its end (docs/notes/capacity.md). A variable per parameter, on the cell's device, is added to in place by each
gradient as soon as the backward has it, inside the call: the backward holds the sum and the gradient of the
parameter it is at.

The variables have no fixed shape and hold nothing between steps (a model that never trains spends nothing on
them): a step's first backward of the cell assigns its gradients (`Add(..., first=True)`, taking their buffers),
later ones add theirs, and `Read` hands the sums on and empties the variables; the values read keep their
buffers until the optimizer has used them. (Kept until the next step, the last step's sums stood beside a first
backward that returns its gradients together, the saved stack's.)

What a backward returns for the sums is a token, a scalar that exists once its gradients are added: the device's
next action waits for it, as it waited for the sum (executor._Interpreter.Last), and a loop carries it.
"""

import functools

import tensorflow as tf

from lingpipe.gpipe import timeline

_HALF = (tf.bfloat16, tf.float16)


def _Empty(variables):
  for variable in variables:
    variable.assign(tf.zeros([0], variable.dtype), read_value=False)


def SumDtype(dtype):
  """The dtype a gradient of `dtype` is summed in: float32 for half precision, as the master weights it updates."""
  return tf.float32 if dtype in _HALF else dtype


class GradientSums:
  """The gradient sums of one cell in one replica: one variable per parameter, on the cell's device. Not a
  tf.Module: the sums are no part of the model (no checkpoint, no export, no variable count)."""

  def __init__(self, shapes, dtypes, device, name):
    """`shapes` and `dtypes`: the cell's parameters' (cell_params.CellParams: its variables' shapes, the dtypes
    it computes with); `name`: a prefix for the variables' names."""
    self._shapes = [tf.TensorShape(s) for s in shapes]
    with tf.init_scope(), tf.device(device):
      self.variables = [
          tf.Variable(tf.zeros([0], SumDtype(d)), trainable=False, shape=tf.TensorShape(None),
                      name='%s_gradient_sum_%d' % (name, i)) for i, d in enumerate(dtypes)]
    # A call of its own: the same assigns in the step's graph let Grappler's arithmetic optimizer give a
    # convolution's filter gradient another tensor's shape in AmoebaNet-D's 1F1B step ("filter must be
    # 4-dimensional: [64]"). A partial: TensorFlow counts traces per Python function, and each cell has its own.
    self._empty = tf.function(functools.partial(_Empty, self.variables), autograph=False,
                              experimental_attributes={'_noinline': True})

  def Add(self, grads, first):
    """Adds `grads` (one per parameter, in the cell's order; None for a parameter the cell's outputs do not depend
    on) to the sums, each as soon as it exists; `first` (the step's first backward of the cell) assigns them
    instead. Returns the token."""
    updates = []
    for variable, grad, shape in zip(self.variables, grads, self._shapes):
      if grad is None:
        if not first:
          continue
        grad = tf.zeros(shape, variable.dtype)
      grad = tf.convert_to_tensor(grad)  # IndexedSlices (an embedding's) are summed dense.
      grad = tf.cast(grad, variable.dtype) if grad.dtype != variable.dtype else grad
      update = variable.assign if first else variable.assign_add
      updates.append(update(grad, read_value=False))
    with tf.control_dependencies(updates):
      return tf.zeros([], tf.float32)

  def Read(self, token):
    """The sums once `token` exists, in the parameters' shapes; the variables are emptied once read."""
    with tf.control_dependencies([token]):
      values = [tf.ensure_shape(v.read_value(), shape) for v, shape in zip(self.variables, self._shapes)]
    with tf.control_dependencies(values):
      self._empty()
    return values


def SummingBackward(backward, device, sums, stamped=False):
  """A traced, never-inlined function for one re-computing backward task of a pipeline cell.

  Step(inputs, output_grads, micro_batch_index, params, token) -> (input grads, token), where
  backward(inputs, output_grads, micro_batch_index, params) -> (input grads, param grads) re-computes the cell
  (cell_gradient.CellGradient.Backward), `params` are its parameter values (a list of tensors, cell_params.py),
  and each parameter gradient is added to the cell's GradientSums `sums` inside the call, as soon as it exists
  (assigned where `token` is None: the step's first backward of the cell); the token returned exists once all
  are. Because the call is not inlined it starts only when all its arguments exist, so threading the token
  through the calls of one cell runs them one at a time, in schedule order: at most one micro-batch's
  recomputed activations per device are alive. With `stamped`, Step also returns its start and end times
  (timeline.Stamped).
  """

  def Step(inputs, output_grads, micro_batch_index, params, token):
    def Body():
      input_grads, param_grads = backward(inputs, output_grads, micro_batch_index, params)
      return input_grads, sums.Add(param_grads, first=token is None)

    with tf.device(device):
      if not stamped:
        return Body()
      (input_grads, token_out), stamps = timeline.Stamped(device, Body)
      return input_grads, token_out, stamps

  return tf.function(Step, autograph=False, experimental_attributes={'_noinline': True})


def OfMesh(cell_params, mesh, name):
  """[replica][cell]: the GradientSums of each cell (cell_params[k]: its cell_params.CellParams) on its device in
  each replica (mesh[r][k])."""
  return [[GradientSums([v.shape for v in params.variables], params.dtypes, device, '%s/cell_%d/replica_%d' % (
      name, k, r)) for k, (params, device) in enumerate(zip(cell_params, row))] for r, row in enumerate(mesh)]
