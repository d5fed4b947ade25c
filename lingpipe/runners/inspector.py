"""Inspect: a model's params text, the (replica, split) -> device map, and a table of its variables (name, shape,
device, bytes) and pipeline cells."""

from lingpipe.core.nested_map import NestedMap
from lingpipe.distributed import cluster
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe.planner import memory_plan


def VariableTable(task):
  """Rows (name, shape, device, bytes, trainable) of every variable of the task."""
  rows = []
  for var in sorted(task.variables, key=lambda v: v.name):
    nbytes = var.shape.num_elements() * var.dtype.size
    rows.append((var.name.split(':')[0], 'x'.join(str(d) for d in var.shape) or 'scalar', var.device or '-',
                 nbytes, var.trainable))
  return rows


def Inspect(p, out=None, device_memory=None):
  """Prints the params, the device mesh, the variables and each pipeline's cells with the planner's prediction;
  what fits is said only against a budget: `device_memory` (bytes), else the workers' reported budgets."""
  mesh = cluster.Current()
  with mesh.Placement():
    task = p.task.Instantiate()
  print('# Params of %s (dataset %s)' % (p.model, p.dataset), file=out)
  print(p.ToText(), file=out)
  PrintMesh(mesh, p.cluster, out)
  rows = VariableTable(task)
  widths = [max([len(h)] + [len(str(r[i])) for r in rows]) for i, h in enumerate(('name', 'shape', 'device'))]
  print('# Variables', file=out)
  print('%-*s  %-*s  %-*s  %12s  %s' % (widths[0], 'name', widths[1], 'shape', widths[2], 'device', 'bytes',
                                        'trainable'), file=out)
  for name, shape, device, nbytes, trainable in rows:
    print('%-*s  %-*s  %-*s  %12d  %s' % (widths[0], name, widths[1], shape, widths[2], device, nbytes,
                                          'yes' if trainable else 'no'), file=out)
  slots = memory_plan.OptimizerSlots(p.task.train.optimizer) if 'train' in p.task else 0
  budget, process = _Budget(mesh, device_memory)
  for layer in task.Walk():
    if isinstance(layer, pipelining_layer.PipeliningLayer):
      PrintCells(layer, out, slots, budget, process, mesh)
  trainable = sum(var.shape.num_elements() for var in task.trainable_variables)
  total_bytes = sum(r[3] for r in rows)
  print('# %d variables, %d trainable parameters, %.2f MiB' % (len(rows), trainable, total_bytes / 2**20),
        file=out, flush=True)
  return rows


def PrintMesh(mesh, cluster_params, out=None):
  """The (replica, split) -> device map the model's pipelines use."""
  where = 'workers of job %r' % mesh.remote_job if mesh.is_remote else 'local devices'
  print('# Device mesh: %d replica(s) x %d split(s) on %s, mesh_order=%s' % (
      mesh.num_replicas, len(mesh.devices[0]), where, cluster_params.mesh_order), file=out)
  for line in mesh.MapLines():
    print(line, file=out)


def _Human(n, unit=''):
  if n is None:
    return 'n/a'
  for suffix in ('', 'K', 'M', 'G', 'T'):
    if abs(n) < 1000:
      return '%.3g%s%s' % (n, suffix, unit)
    n /= 1000.0
  return '%.3gP%s' % (n, unit)


def _Budget(mesh, device_memory):
  """(bytes each process or device must fit in, the process model (memory/process_model.py) or None): the
  budget (memory_budget.Limit: --device_memory, the workers' smallest, or this process's own); (None, None)
  without one. The process model applies on CPU machines, where a device is a process's (a worker's) or the
  trainer's own memory."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.memory import calibration  # pylint: disable=g-import-not-at-top
  from lingpipe.memory import memory_budget  # pylint: disable=g-import-not-at-top
  budget = memory_budget.Limit(mesh, device_memory)
  if budget is None or tf.config.list_physical_devices('GPU'):
    return budget, None
  return budget, calibration.LoadOrCalibrate(parts=('workers',) if mesh.is_remote else ('trainer',))


def PrintCells(pipeline, out=None, slots=0, budget=None, process=None, mesh=None):
  """A table of the pipeline's cells: layers, device, parameters, flops, estimated activation memory; and the
  memory planner's prediction for its K and M (`slots`: the optimizer's slot variables per weight), against
  `budget` (bytes) when one is given, with each process's peak from `process` (process_model.Calibration)."""
  p = pipeline.params
  print('# Pipeline %s: %d cells, %d micro-batches, remat=%s, schedule=%s, weights %s, computes in %s' % (
      pipeline.path, pipeline.num_cells, p.num_micro_batches, p.remat, p.schedule, p.dtype.name,
      pipeline.fprop_dtype.name), file=out)
  print('%-5s %-28s %-26s %10s %10s %14s %14s' % ('cell', 'layers', 'device', 'params', 'flops',
                                                  'act/micro-b', 'boundary'), file=out)
  for s in CellSummaries(pipeline):
    names = [path.rsplit('/', 1)[-1] for path in s.layers]
    layers = names[0] if len(names) == 1 else '%s..%s (%d)' % (names[0], names[-1], len(names))
    print('%-5d %-28s %-26s %10s %10s %14s %14s' % (
        s.cell, layers, s.device[-26:], _Human(s.params), _Human(s.flops),
        _Human(s.activation_bytes, 'B'), _Human(s.boundary_bytes, 'B')), file=out)
  if p.input_shapes is None:
    print('# (set input_shapes on the PipeliningLayer for flops and activation estimates)', file=out)
    return
  shapes = p.input_shapes
  batch = memory_plan.BatchSize(shapes, p.batch_dim)
  candidates = memory_plan.Candidates(
      [layer.params for layer in pipeline.units], shapes, pipeline.num_devices, batch,
      micro_batches=(pipeline.params.num_micro_batches,), balance=[
          len(pipeline.CellLayers(k)) for k in range(pipeline.num_cells)], slots=slots, dtype_size=p.dtype.size,
      fprop_dtype=pipeline.fprop_dtype,
      virtual_stages=(p.virtual_stages,) if p.virtual_stages > 1 else ())
  peak_of = None
  if process is not None:
    one = not (mesh is not None and mesh.is_remote)  # Local devices: one process; else a worker per device.
    peak_of = lambda c: max(memory_plan.ProcessPeaks(c, process.trainer if one else process.worker, one))
  print('# Memory planner, per device, with %d optimizer slot(s) per weight (lingpipe/gpipe/planner/memory_plan.py; '
        'tools/plan_pipeline.py explores K and M)%s:' % (
            slots, '; against a budget of %.0f MiB%s' % (budget / 2**20, ' per process' if process else '')
            if budget else '; give --device_memory (or workers with --memory_limit) to see whether it fits'),
        file=out)
  for line in memory_plan.Table([c for c in candidates if c.num_splits == pipeline.num_devices], budget, peak_of):
    print(line, file=out)


def CellSummaries(pipe):
  """Per cell of PipeliningLayer `pipe`: NestedMap(cell, layers, device, params, flops,
  activation_bytes, boundary_bytes).

  flops and activation estimates need params.input_shapes (else they are None). activation_bytes is
  the sum of the cell's layer outputs for one micro-batch (what re-computing one cell holds);
  boundary_bytes is the cell's output for the whole mini-batch (what the pipeline keeps between
  cells).
  """
  shapes = pipe._InputShapes()  # pylint: disable=protected-access
  num_micro = pipe.params.num_micro_batches
  summaries = []
  for k in range(pipe.num_cells):
    layers = pipe.CellLayers(k)
    params = sum(v.shape.num_elements() for layer in layers for v in layer.trainable_variables)
    flops = activation = boundary = None
    if shapes is not None:
      flops = activation = 0
      for layer in layers:
        meta = type(layer).FPropMeta(layer.params, shapes)
        shapes = meta.out_shapes[0]
        flops += meta.flops
        activation += memory_plan.Bytes(shapes, layer.fprop_dtype.size) // num_micro
      boundary = memory_plan.Bytes(shapes, layers[-1].fprop_dtype.size)
    summaries.append(NestedMap(cell=k, layers=[layer.path for layer in layers], device=pipe.devices[k],
                               params=params, flops=flops, activation_bytes=activation,
                               boundary_bytes=boundary))
  return summaries
