"""PipeliningLayer: GPipe. A sequence of layers cut into K cells on K devices, fed M micro-batches.

The layer builds and places the cells and asks schedule.py for a Plan; executor.py runs it. Training
(inside `context.Training(True)`): the mini-batch is split into M micro-batches that flow through
the cells as the plan says; each (micro-batch, cell) action is a call of the cell's traced function
on the cell's device, and the ticks where the plan repeats run as one loop, so graph size and time
to first step stay nearly flat in M. A cell's trainable variables reach its functions as inputs,
read once per step (cell_params.py). The backward pass is a custom gradient that runs the plan's
backward phase: each cell's backward on its own device (re-computing the forward or using the
activations its forward kept, per the `remat` policy, remat.py), weight gradients accumulated over
micro-batches on that device and returned once: one synchronous update, with the same gradients as
the plain sequential model.

Batch norm inside cells normalizes each micro-batch with its own moments (as GPipe does). The
moments of all micro-batches leave the cells as one value per layer (moments.Moments) and go to the
task's collector, which moves the averages once per step, i.e. with the whole mini-batch's mean and
variance (on its own, without a task, the layer moves them itself).

Data parallelism (distributed/cluster.py, distributed/replicas.py): under a cluster of R replicas,
the layer knows the R x K mesh; a forward inside `context.Replica(r)` runs its cells on row r
(variables stay on row 0), and its batch norm moments join those of the other replicas in the task's
collector.

Evaluation runs the same forward schedule without gradients; export (`context.Exporting()`) runs the
layers one after another with no placement and no micro-batching, so the SavedModel needs no
pipeline.

What crosses a cell boundary is whatever the last layer of the cell returns: a tensor or a
NestedMap, whose extra fields carry skip connections and side inputs (masks, paddings) to later
cells.
"""

import numpy as np
import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import param_checks
from lingpipe.core.nested_map import NestedMap
from lingpipe.distributed import cluster
from lingpipe.gpipe import cell_params
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe.engine import cell_functions
from lingpipe.gpipe.engine import gradient_sums
from lingpipe.gpipe.engine import step
from lingpipe.gpipe.planner import layer_times
from lingpipe.gpipe.planner import partition


# The fields lingpipe-train can choose (--pipeline=auto, or each set to 'auto').
AUTO_FIELDS = ('num_splits', 'num_micro_batches', 'remat', 'schedule', 'balance')


class PipeliningLayer(base_layer.BaseLayer):
  """See the module docstring."""

  # Batch norm's targets by path (Pipe), kept once made: layers of this model, not more of its variables.
  _TF_MODULE_IGNORED_PROPERTIES = base_layer.BaseLayer._TF_MODULE_IGNORED_PROPERTIES | {'_moving_stats', '_cell_layers'}

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('cell_tpl', [], 'A list of layer Params, one per cell (the cells are given). Or use `layers`.')
    p.Define('layers', [], 'A flat list of layer Params, cut into num_splits cells by `balance`.')
    p.Define('num_splits', 1, "Number of cells K (with `layers`), or 'auto' for lingpipe-train to choose "
             "(runners/pipeline_choice.py); num_micro_batches, remat, schedule and balance take 'auto' too.",
             check=param_checks.OrAuto(param_checks.Int(1)))
    p.Define('balance', 'uniform', "Layers per cell: a list of counts, one of %s, or 'auto'." % ', '.join(
        partition.METHODS), check=param_checks.Check(
            lambda v: isinstance(v, str) or (isinstance(v, (list, tuple)) and all(
                isinstance(n, int) for n in v)), 'a list of layer counts or a method name'))
    p.Define('input_shapes', None, "Shapes of one input batch (a list, or a dict of lists for NestedMap inputs); "
             "needed by balance='flops'/'time'/'memory' and by inspect's estimates.")
    p.Define('input_dtypes', None, "Dtypes of the inputs that are not floating, for the planner's sample batch: a "
             "name, or a dict of them by input_shapes' keys (e.g. {'ids': 'int32'}).", check=param_checks.OrNone(
                 param_checks.DtypeNames()))
    p.Define('num_micro_batches', 1, "Number of micro-batches M per mini-batch, or 'auto'.",
             check=param_checks.OrAuto(param_checks.Int(1)))
    p.Define('micro_batch_size', 0, 'If > 0, M = batch size / micro_batch_size instead of num_micro_batches.')
    p.Define('batch_dim', 0, 'The batch dimension of every input leaf.')
    p.Define('pad', False, 'Pad a batch that M does not divide with zero rows (dropped from the outputs); '
             'otherwise such a batch is an error.')
    p.Define('remat', 'always', "Re-materialization: 'always' re-computes each cell's forward in the backward; "
             "'except_last' stores the last micro-batch's activations (its backward starts at once); 'never' "
             "stores all activations; 'per_layer' stores each layer's input and re-computes one layer at a time in "
             "the backward (a cell's backward holds one layer's activations); 'auto'.")
    p.Define('schedule', 'gpipe', "Pipeline schedule: one of %s, or 'auto'." % ', '.join(schedule_lib.SCHEDULES))
    p.Define('virtual_stages', 1, "Cells per device v, for schedule='interleaved_1f1b': `layers` are cut into "
             'num_splits x v cells (with `cell_tpl`, len(cell_tpl) / v devices), cell c on device c mod num_splits.')
    p.Define('loop_phases', True, "Run the steady ticks of GPipe's passes as one tf.while_loop (graph size and "
             'time to first step nearly flat in M; phase_loop.py) where the cells share one process\'s memory '
             '(logical CPU devices); elsewhere (workers, GPUs) unrolled: a loop\'s state lives on one device, so '
             'the other cells\' sums and parameters would be copied to it and back. False: unrolled everywhere.')
    p.Define('devices', None, 'Device names for the cells: a list of K, or a list of K per replica; None takes '
             'the current cluster\'s mesh (the trainer\'s; locally: GPUs, else logical CPU devices; see '
             'lingpipe.distributed.cluster).')
    p.Define('auto_choice', '', "What lingpipe-train chose for the fields set to 'auto', on what machine and "
             'with what budget (written by the trainer; a resume reuses the choice).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    unresolved = [name for name in AUTO_FIELDS if p.Get(name) == param_checks.AUTO]
    if unresolved:
      raise errors.ConfigError("Layer %s: %s='auto' is chosen by lingpipe-train before the model is built "
                               '(--pipeline=auto); outside it, set a value (gpipe/choice/auto_config.ChooseFor '
                               'chooses one for a list of layers).' % (self.path, unresolved[0]))
    if p.remat not in schedule_lib.REMAT_POLICIES:
      raise errors.ConfigError('Layer %s: remat must be one of %s, got %r.%s' % (
          self.path, ', '.join(schedule_lib.REMAT_POLICIES), p.remat,
          errors.DidYouMean(str(p.remat), schedule_lib.REMAT_POLICIES)))
    schedule_lib.CheckScheduleName(p.schedule)
    if p.num_micro_batches < 1 or p.micro_batch_size < 0:
      raise errors.ConfigError('Layer %s: num_micro_batches must be >= 1 and micro_batch_size >= 0, got %d and %d.'
                               % (self.path, p.num_micro_batches, p.micro_batch_size))
    if p.virtual_stages < 1:
      raise errors.ConfigError('Layer %s: virtual_stages must be >= 1 (cells per device), got %d.' % (
          self.path, p.virtual_stages))
    if p.virtual_stages > 1 and p.schedule != 'interleaved_1f1b':
      raise errors.ConfigError("Layer %s: virtual_stages=%d needs schedule='interleaved_1f1b' (got %r); the other "
                               'schedules run one cell per device (virtual_stages=1).' % (
                                   self.path, p.virtual_stages, p.schedule))
    if bool(p.cell_tpl) == bool(p.layers):
      raise errors.ConfigError('Layer %s: set exactly one of cell_tpl (one Params per cell) and layers (a flat '
                               'list cut by num_splits and balance).' % self.path)
    if p.cell_tpl:
      units, counts = list(p.cell_tpl), [1] * len(p.cell_tpl)
      if len(units) % p.virtual_stages:
        raise errors.ConfigError('Layer %s: %d cells in cell_tpl cannot be spread as virtual_stages=%d per device; '
                                 'give a multiple of %d cells.' % (self.path, len(units), p.virtual_stages,
                                                                    p.virtual_stages))
    else:
      units = partition.ExpandedLayers(p.layers)
      counts = partition.Partition(units, p.num_splits * p.virtual_stages, p.balance, self._InputShapes(),
                                   self._SampleInputs() if p.balance in ('time', 'memory') else None)
    object.__setattr__(self, '_num_cells', len(counts))
    num_devices = len(counts) // p.virtual_stages
    object.__setattr__(self, '_num_devices', num_devices)
    mesh = cluster.Cluster(list(p.devices)) if p.devices else cluster.Current()
    if base_layer.IsAbstract():  # Nothing is placed: sizes only (any number of cells on this machine).
      object.__setattr__(self, '_mesh', [[mesh.Device(0, num_splits=1)] * self._num_cells])
    else:
      # _mesh[r][k]: the device of cell k in replica r (k mod num_devices). Variables live on
      # replica 0's devices.
      object.__setattr__(self, '_mesh', [[mesh.Device(k % num_devices, r, num_splits=num_devices)
                                          for k in range(self._num_cells)] for r in range(mesh.num_replicas)])
    object.__setattr__(self, '_devices', self._mesh[0])
    object.__setattr__(self, '_bounds', [int(b) for b in np.cumsum([0] + counts)])
    # With `layers`, children are named like SequentialLayer's ('sub_<i>', attribute 'sub'):
    # variable names, seeds and checkpoints do not depend on K or M, and equal those of
    # SequentialLayer(sub=layers) of the same name. Each cell's variables live on its device.
    self.CreateChildren('cell' if p.cell_tpl else 'sub', units,
                        devices=[self._devices[k] for k in range(self._num_cells) for _ in range(counts[k])])
    object.__setattr__(self, '_cell_params', None if base_layer.IsAbstract() else [
        cell_params.CellParams.OfLayers(self.CellLayers(k)) for k in range(self._num_cells)])
    # Outside the module's tracking: no part of the model.
    object.__setattr__(self, '_gradient_sums', None if base_layer.IsAbstract() else gradient_sums.OfMesh(
        self._cell_params, self._mesh, self.path))
    object.__setattr__(self, '_moving_stats', None)  # {path: layer} of batch norm's targets (Pipe), made once.
    object.__setattr__(self, '_cell_layers', [self.CellLayers(k) for k in range(self._num_cells)])
    # One function per kind of layer (layer_functions.py) in GPipe's schedule where the backward re-computes the
    # cell. Where its forwards keep what the backward reads on a saved stack (remat 'never', 'per_layer'), shared
    # functions held more: up to 1.9x the weights beside two busy processes under 'never' (1.3x unrolled), 1.4x the
    # peak of 'per_layer' at K=2, M=4 (a 12-layer Transformer, tests/test_remat.py's); the interleaved schedules
    # order a device's inline actions by control edges, which an inlined call's ops do not keep (their measured
    # timeline left the plan's order in one run of three).
    object.__setattr__(self, 'functions', cell_functions.CellFunctions(
        self._cell_layers, self._mesh, self._cell_params, p.batch_dim, self._gradient_sums,
        share_layers=p.schedule == 'gpipe' and p.remat not in schedule_lib.KEEPS_ALL,
        per_layer=p.remat == 'per_layer'))

  # -- structure
  # -----------------------------------------------------------------------------------------------
  @property
  def units(self):
    """The layers (or given cells) in order."""
    return getattr(self, 'cell' if self.params.cell_tpl else 'sub')

  @property
  def num_cells(self):
    return self._num_cells

  @property
  def num_devices(self):
    """K: the devices of one replica (num_cells / virtual_stages)."""
    return self._num_devices

  @property
  def devices(self):
    """The cells' devices in replica 0 (where the variables live)."""
    return list(self._devices)

  @property
  def num_replicas(self):
    return len(self._mesh)

  def Replica(self):
    """The replica the current FProp is for (context.Replica), checked against the mesh."""
    r = context.CurrentReplica()
    if not 0 <= r < len(self._mesh):
      raise errors.ConfigError('Layer %s was built for %d replica(s) but is run as replica %d; build it under the '
                               'cluster that runs it (cluster.Use).' % (self.path, len(self._mesh), r))
    return r

  def ReplicaDevices(self, replica):
    """The device of each cell in `replica`."""
    return list(self._mesh[replica])

  def CellLayers(self, k):
    """The layers of cell k."""
    return list(self.units[self._bounds[k]:self._bounds[k + 1]])

  def CellVariables(self, k):
    return [v for layer in self.CellLayers(k) for v in layer.trainable_variables]

  def _InputShapes(self):
    shapes = self.params.input_shapes
    if shapes is None:
      return None
    if isinstance(shapes, dict):
      return NestedMap({k: tf.TensorShape(v) for k, v in shapes.items()})
    return tf.TensorShape(shapes)

  def _SampleInputs(self):
    """A sample batch of input_shapes and input_dtypes, for profiling layers (balance='time' or 'memory')."""
    shapes = self.params.input_shapes
    return None if shapes is None else layer_times.SampleInputs(layer_times.Specs(
        shapes, tf.float32, self.params.input_dtypes))

  @classmethod
  def FPropMeta(cls, params, *input_shapes):
    units = params.cell_tpl or partition.ExpandedLayers(params.layers)
    flops, shapes = 0, input_shapes
    for unit in units:
      meta = unit.cls.FPropMeta(unit, *shapes)
      flops += meta.flops
      shapes = meta.out_shapes
    return base_layer.Meta(shapes, flops)

  # -- forward
  # -------------------------------------------------------------------------------------------------
  def NumMicroBatches(self, inputs):
    p = self.params
    if not p.micro_batch_size:
      return p.num_micro_batches
    leaf = tf.nest.flatten(inputs)[0]
    batch = leaf.shape[p.batch_dim]
    if batch is None or batch % p.micro_batch_size:
      raise errors.ConfigError('Layer %s: batch size %s is not a multiple of micro_batch_size %d.' % (
          self.path, batch, p.micro_batch_size))
    return batch // p.micro_batch_size

  def FProp(self, inputs, training=None):
    """The last cell's outputs. `training`: True or False, or None for the ambient
    `context.Training`. Training through FProp works for 'gpipe' only; the training call for every
    schedule is FPropWithLoss."""
    with context.TrainingOrAmbient(training):
      return self._FProp(inputs)

  def _FProp(self, inputs):
    if context.IsExporting():
      for k in range(self._num_cells):
        inputs = cell_functions.RunCell(self._cell_layers, k, inputs)
      return inputs
    if context.IsTraining():
      if self.NeedsLoss():
        raise errors.ConfigError(
            'Layer %s: schedule %r computes the loss inside the pipeline, so it trains through '
            'FPropWithLoss(inputs, loss_inputs, loss_fn, training=True), which every schedule takes; FProp in '
            'training is for schedule=\'gpipe\' only.' % (self.path, self.params.schedule))
      return step.TrainFProp(self.Pipe(inputs), inputs)
    return step.Forward(self.Pipe(inputs), inputs, training=False)[0]

  def NeedsLoss(self):
    """Whether training runs through FPropWithLoss: the schedule interleaves forwards and backwards."""
    return self.params.schedule in schedule_lib.NEEDS_LOSS

  def FPropWithLoss(self, inputs, loss_inputs, loss_fn, training=None):
    """(loss, metrics): the training call of every schedule (docs/guide.md), also evaluation and export.

    Args:
      inputs: the pipeline's inputs (a tensor or a NestedMap), batch along `batch_dim`.
      loss_inputs: what loss_fn reads beside the outputs (e.g. labels), split along dimension 0 like
        the inputs.
      loss_fn: loss_fn(outputs, loss_inputs) -> (loss, {name: (value, weight)}); runs on the last
        cell's device, per micro-batch where the schedule needs it. The batch's loss weights each
        micro-batch's by metrics['loss'][1] (1 when absent).
      training: True or False; None takes the ambient `context.Training` (set by tasks and the
        trainer).

    Returns:
      (loss, {name: (value, weight)}), differentiable with a tape with respect to the layer's
      variables and the watched inputs.
    """
    with context.TrainingOrAmbient(training):
      if not context.IsTraining() or context.IsExporting():
        return loss_fn(self._FProp(inputs), loss_inputs)
      return step.FPropWithLoss(self.Pipe(inputs), inputs, loss_inputs, loss_fn)

  def Pipe(self, inputs):
    """What a step of this pipeline on `inputs` needs of the layer (step.Pipe), in the current replica."""
    r = self.Replica()
    if self._moving_stats is None:  # The layers are built: walked once, not on every call.
      object.__setattr__(self, '_moving_stats', {
          target.path: target for layer in self.Walk() for target in layer.MovingStatsTargets()})
    return step.Pipe(self.params, self.path, self._num_cells, self._num_devices, self.NumMicroBatches(inputs), r,
                     list(self._mesh[r]), self.path if len(self._mesh) == 1 else '%s/replica_%d' % (self.path, r),
                     self._cell_params, cell_functions.CopyOf(r), self.functions,
                     self._gradient_sums[r] if self._gradient_sums else None, self._moving_stats)

