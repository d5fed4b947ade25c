"""The traced functions a PipeliningLayer's cells run as: each cell's forward, its re-computing
backward and its inline body, cached by what their traces bake in, and handed to the executor as
executor.Cells."""

import contextlib
import functools

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.distributed import mirrors
from lingpipe.gpipe import timeline
from lingpipe.gpipe.engine import cell_gradient
from lingpipe.gpipe.engine import executor
from lingpipe.gpipe.engine import gradient_sums
from lingpipe.gpipe.engine import layer_functions
from lingpipe.gpipe.engine import layer_remat
from lingpipe.gpipe.engine import remat


def _SeedGraph():
  """The graph of the step seed a cell's function captures (context.StepSeed), or None. A traced
  function keeps what it captured: called from another graph (Keras traces a second step function
  for a smaller last batch) it would read a tensor of the first, so each graph gets its own cell
  functions. The graph itself, not its id: a new graph could reuse a collected one's id."""
  seed = context.StepSeedValue()
  return seed.graph if isinstance(seed, tf.Tensor) and tf.is_symbolic_tensor(seed) else None


def RunCell(cell_layers, k, inputs, functions=None, per_layer=False):
  """Cell k's layers (`cell_layers[k]`) on `inputs`, one after another, where the caller placed them; with
  `functions` (layer_functions.LayerFunctions), each layer whose kind the cell holds more than once as a call of
  its kind's traced function (not while exporting); with `per_layer`, in training, each layer re-computed alone in
  the backward (layer_remat.py)."""
  shared = functions.Shared(cell_layers[k]) if functions is not None and not context.IsExporting() else ()
  per_layer = per_layer and context.IsTraining() and not context.IsExporting()
  x = inputs
  for i, layer in enumerate(cell_layers[k]):
    run = functools.partial(functions.Call, layer) if id(layer) in shared else layer.FProp
    try:
      x = layer_remat.Recomputed(layer, x, run) if per_layer else run(x)
    except AttributeError as e:
      if i == 0 and k > 0 and 'NestedMap has no field' in str(e):
        raise errors.ConfigError('Cell %d (%s) cannot use the output of cell %d (%s): %s' % (
            k, cell_layers[k][0].path, k - 1, cell_layers[k - 1][-1].path, e)) from e
      raise
  return x


def CopyOf(replica):
  """variable -> what `replica` reads for it: its mirrored copy (distributed/mirrors.py), else None (the variable
  itself, on replica 0's devices)."""
  mirrored = mirrors.Current()
  if mirrored is None or replica == 0:
    return None
  return lambda v: mirrored.Of(v, replica)


class CellFunctions:
  """The functions of a PipeliningLayer's cells: `cell_layers[k]` are cell k's layers, `mesh[r][k]` its device in
  replica r, `cell_params[k]` its cell_params.CellParams and `sums[r][k]` its gradient_sums.GradientSums."""

  def __init__(self, cell_layers, mesh, cell_params, batch_dim, sums, share_layers=True, per_layer=False):
    self._cell_layers, self._mesh, self._cell_params, self._batch_dim = cell_layers, mesh, cell_params, batch_dim
    self._sums = sums
    self._per_layer = per_layer  # remat 'per_layer': each layer re-computed alone in the backward.
    self._num_cells = len(mesh[0])
    # Layers of a kind run as calls of one function (layer_functions.py), unless `share_layers` is False.
    self._layer_functions = layer_functions.LayerFunctions() if share_layers else None
    self.cache = {}  # {what a trace bakes in: its tf.function}

  def Body(self, k, r, training, inputs, micro_batch_index, params, collector, padding=None):
    """Cell k of replica r on `inputs`, reading its trainable variables as the tensors `params`.
    `padding`: (M, pad rows, micro-batch size) when the batch was padded (the last rows of the last
    micro-batches are pad rows, which batch statistics leave out: context.RealRows), else None."""
    with tf.device(self._mesh[r][k]), context.Training(training), context.MicroBatch(micro_batch_index), \
        context.CollectBatchNormStats(collector), self._RealRows(padding, micro_batch_index), \
        base_layer.VariablesAs(self._cell_layers[k], self._cell_params[k].Values(params, CopyOf(r))):
      return RunCell(self._cell_layers, k, inputs, self._layer_functions, self._per_layer)

  def RunAlone(self, r, inputs):
    """The one cell of replica r on `inputs`, on its device, reading its variables as they are: a pipeline of one
    cell and one micro-batch is the plain model (with remat 'per_layer', each layer re-computed alone)."""
    with tf.device(self._mesh[r][0]):
      return RunCell(self._cell_layers, 0, inputs, per_layer=self._per_layer)

  def _RealRows(self, padding, micro_batch_index):
    if padding is None:
      return contextlib.nullcontext()
    num_micro, pad_rows, size = padding
    first = tf.cast(micro_batch_index, tf.int32) * size
    return context.RealRows(self._batch_dim, tf.clip_by_value(num_micro * size - pad_rows - first, 0, size))

  def Forward(self, k, r, training, padding=None, stamped=False, wanted=None):
    """A tf.function running cell k of replica r on its device: (inputs, micro-batch index,
    parameter values) -> (outputs, batch-norm moments {layer path: moments.Moments}), and with
    `stamped` its start and end times (timeline.Stamped). One per `padding` (see Body) and `wanted`,
    which the trace bakes in.

    `wanted` (remat.WantsGrad): the input leaves whose gradients a taped backward of this call
    computes. The gradient of a function call is the gradient of the whole function, for every float
    input, and the next action's wait keeps it from being pruned: the others are cut here
    (stop_gradient), so their gradient is a zero fill instead of, say, a first layer's whole input
    gradient."""
    wanted = None if wanted is None else tuple(wanted)
    key = ('forward', k, r, training, padding, stamped, wanted, _SeedGraph())
    if key not in self.cache:

      def Cell(inputs, micro_batch_index, params):
        if wanted is not None:
          inputs = remat.CutUnwanted(inputs, wanted)

        def Body():
          collector = context.BatchNormStats()
          outputs = self.Body(k, r, training, inputs, micro_batch_index, params, collector, padding)
          return outputs, {path: part for path, (_, part) in collector.moments.items()}

        if not stamped:
          return Body()
        (outputs, moments), stamps = timeline.Stamped(self._mesh[r][k], Body)
        return outputs, moments, stamps

      # Not inlined: the graph keeps one call per (micro-batch, cell) instead of M copies of every
      # cell, which keeps graph optimization and time to first step flat in M.
      self.cache[key] = tf.function(Cell, autograph=False, experimental_attributes={'_noinline': True})
    return self.cache[key]

  def Backward(self, k, r, padding=None, stamped=False, wanted=None):
    """Cell k's re-computing backward task in replica r (gradient_sums.SummingBackward), traced once
    per `padding` and `wanted` (the input gradients it computes) and called per micro-batch."""
    wanted = None if wanted is None else tuple(wanted)
    key = ('backward', k, r, padding, stamped, wanted, _SeedGraph())
    if key not in self.cache:
      # Re-computed through the forward's own function and the gradient TensorFlow built for it (a
      # taped forward needs it too), so each cell's gradient is built once. Its batch-norm moments
      # are discarded: the forward already collected them.
      gradient = cell_gradient.CellGradient(self.Forward(k, r, True, padding, False, wanted))
      backward = lambda a, dy, index, params: gradient.Backward(a, index, params, dy, wanted)
      self.cache[key] = gradient_sums.SummingBackward(backward, self._mesh[r][k], self._sums[r][k], stamped)
    return self.cache[key]

  def ExecutorCells(self, replica, params, training, padding, stamped, wanted=None):
    """executor.Cells of `replica`: each cell's forward and, in training, its re-computing and taped
    backward and its gradient pair, through which GPipe's forwards under remat 'never' keep their
    activations as data. `wanted`: which of the pipeline's input gradients cell 0 computes
    (remat.WantedInputGrads; None: all)."""
    cells = range(self._num_cells)
    forward = [self.Forward(k, replica, training, padding, stamped, wanted if k == 0 else None) for k in cells]
    return executor.Cells(
        self._mesh[replica], params, forward,
        backward=[self.Backward(k, replica, padding, stamped, wanted if k == 0 else None) for k in cells]
        if training else None,
        taped_backward=remat.TapedBackward,
        body=[functools.partial(self.InlineBody, k, replica, padding) for k in cells] if training else None,
        wanted=wanted, saving=[cell_gradient.CellGradient(f) for f in forward] if training else None,
        sums=self._sums[replica] if training else None)

  def InlineBody(self, k, r, padding, inputs, micro_batch_index, params, recomputing):
    """Cell k in training, traced where it is called (executor.Cells.body): (outputs, moments); a
    re-computation discards its moments (the forward already collected them)."""
    collector = context.BatchNormStats(discard=recomputing)
    outputs = self.Body(k, r, True, inputs, micro_batch_index, params, collector, padding)
    return outputs, {path: part for path, (_, part) in collector.moments.items()}
