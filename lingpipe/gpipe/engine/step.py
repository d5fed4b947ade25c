"""A GPipe step, forward and backward, for every schedule: a PipeliningLayer hands it a `Pipe` (what the step
needs of the layer, once per call) and gets the outputs, or (loss, metrics) with the plain model's gradients.

`Forward` runs the forward phase of the schedule's plan (evaluation, and GPipe's training forward). In training
`FPropWithLoss` is the one entry (PipeliningLayer.FPropWithLoss calls it). What it runs depends on the plan:
- A fill-drain plan (GPipe) has a forward phase and a backward phase. `TrainFProp` is one custom
  gradient whose forward runs the forward phase (`Forward`) and whose gradient runs the backward
  phase; the loss runs after it on the whole batch's outputs, on the last cell's device
  (`LossOnDevice`).
- A plan that interleaves forwards and backwards (schedule.NEEDS_LOSS: 1F1B, interleaved 1F1B, zero
  bubble) starts micro-batch m's backward as soon as its forward has produced its loss, before later
  micro-batches' forwards, so the loss cannot wait for the whole batch. `_Interleaved` runs the
  whole plan (forwards, the per-micro-batch losses, backwards, the weight-gradient sums on each
  cell's device) inside the forward of one custom gradient, and its gradient only scales the
  gradients it already has by the incoming gradient of the loss.
To the caller both are a function (inputs, variables) -> (loss, metrics) with the usual gradients,
so a task's tape-based training step is the same for every schedule. Each cell's weight gradients are
summed over its micro-batches on its device (gradient_sums.py) and read once, by variable
(`_GradientsByVariable`).

With interleaved plans the batch's loss is the mean of the micro-batches' losses weighted by their
loss weights (metrics['loss'][1], e.g. examples or tokens; 1 each when absent), which equals the
loss of the whole batch when the task's loss is a weighted mean; each micro-batch's backward starts
from the gradient of w_m x loss_m, and everything is divided by the sum of the weights at the end
(the sum is only known then). Metrics combine the same way, each by its own weight.
"""

from typing import Callable, Dict, List, NamedTuple, Optional

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.distributed import replicas
from lingpipe.gpipe import microbatch
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe import timeline
from lingpipe.gpipe.engine import cell_functions
from lingpipe.gpipe.engine import executor
from lingpipe.gpipe.engine import gradient_sums
from lingpipe.gpipe.engine import phase_loop
from lingpipe.gpipe.engine import remat
from lingpipe.gpipe.engine import step_facts


class Pipe(NamedTuple):
  """What a step needs of its PipeliningLayer (PipeliningLayer.Pipe), handed over once per call."""
  params: object  # the layer's Params: batch_dim, pad, schedule, remat, loop_phases
  path: str  # the layer's, for messages
  num_cells: int
  num_devices: int  # K
  num_micro_batches: int  # M of this call's batch
  replica: int  # the replica this call runs (context.Replica)
  devices: List[str]  # cell k's device in this replica
  name: str  # the timeline's name of this pipeline (and replica)
  cell_params: List[object]  # each cell's cell_params.CellParams
  copy_of: Optional[Callable]  # variable -> what this replica reads for it (a mirrored copy); None: itself
  functions: cell_functions.CellFunctions  # each cell's traced forward and backwards
  sums: List[gradient_sums.GradientSums]  # each cell's gradient sums in this replica
  moving_stats: Dict[str, object]  # {layer path: the layer whose moving statistics batch norm moves}


def FPropWithLoss(pipe, inputs, loss_inputs, loss_fn):
  """(loss, metrics) of the pipeline `pipe` in training on `inputs`: loss_fn(outputs,
  loss_inputs) -> (loss, {name: (value, weight)}) on the last cell's device, per micro-batch where
  the plan interleaves."""
  if pipe.params.schedule in schedule_lib.NEEDS_LOSS:
    return _Interleaved(pipe, inputs, loss_inputs, loss_fn)
  return LossOnDevice(pipe.devices[-1], TrainFProp(pipe, inputs), loss_inputs, loss_fn)


def Forward(pipe, inputs, training, wanted=None):
  """Runs the forward phase of the schedule's plan (schedule.py, executor.py). Returns (merged outputs, NestedMap
  of what the backward needs). `wanted`: which input gradients the backward computes (executor.Cells)."""
  p, num_micro = pipe.params, pipe.num_micro_batches
  plan = schedule_lib.MakePlan(p.schedule, num_micro, pipe.num_cells, p.remat if training else None,
                               pipe.num_devices)
  params = _ReadParams(pipe)
  if training:  # Inside the custom gradient of TrainFProp.
    inputs, params = executor.CutFromCallerTapes(inputs, params, pipe.devices)
  # Evaluation may pad: a last, smaller eval batch must not fail, and no gradient sees the padded
  # rows.
  with tf.device(pipe.devices[0]):
    micro, stacked, pad_rows = microbatch.Cut(inputs, num_micro, p.batch_dim, p.pad or not training)
  padding = _Padding(micro, num_micro, pad_rows, p.batch_dim) if training else None
  recorder = timeline.Current()
  cells = pipe.functions.ExecutorCells(pipe.replica, params, training, padding, recorder is not None, wanted)
  facts = step_facts.Derive(plan, cells.saving, _LoopPhases(pipe))  # What the whole step reads of the plan.
  result = executor.Forward(facts, cells, micro, stacked if facts.loops[plan_lib.FORWARD] else None,
                            recorder=recorder, name=pipe.name)
  if training:
    _ApplyBatchNormMoments(pipe, result.moments)
  with tf.device(pipe.devices[-1]):
    outputs = microbatch.MergeStacked(result.outputs, p.batch_dim, pad_rows)
  return outputs, NestedMap(plan=plan, facts=facts, kept=result.kept, params=params, pad_rows=pad_rows,
                            padding=padding, wanted=wanted)


def _LoopPhases(pipe):
  """Whether the passes' steady ticks run as a tf.while_loop (p.loop_phases): only where every
  cell's device is a CPU device of one process, whose memory they share."""
  hosts = {phase_loop.HostMemory(device) for device in pipe.devices}
  return bool(pipe.params.loop_phases) and len(hosts) == 1 and None not in hosts


def _Padding(micro, num_micro, pad_rows, batch_dim):
  """(M, pad rows, micro-batch size) of a padded batch (see CellFunctions.Body), or None."""
  if not pad_rows:
    return None
  return num_micro, pad_rows, int(tf.nest.flatten(micro[0])[0].shape[batch_dim])


def _ReadParams(pipe):
  """Each cell's parameter values, read once per step on its device in the pipe's replica (from its own
  copies where the weights are mirrored)."""
  params = []
  for k in range(pipe.num_cells):
    with tf.device(pipe.devices[k]):
      params.append(pipe.cell_params[k].Read(pipe.copy_of))
  return params


def _ApplyBatchNormMoments(pipe, merged):
  """Hands the moments of all micro-batches ({layer path: moments.Moments}) to the task's
  collector, which moves the averages once per step (and once for all replicas); a pipeline run on
  its own moves them here."""
  collector = context.CurrentBatchNormStats()
  own = collector is None
  collector = collector or context.BatchNormStats()
  for path, part in merged.items():
    collector.Add(pipe.moving_stats[path], part)
  if own:
    collector.Update()


def _GradientsByVariable(pipe, summed):
  """{variable.ref(): gradient} of the executor's {cell: [token of its gradient sum]}: each cell's sums
  read (gradient_sums.GradientSums.Read), keyed by the variables the replica read (_ReadParams)."""
  copy_of, by_ref = pipe.copy_of or (lambda v: v), {}
  for k, (token,) in summed.items():
    with tf.device(pipe.devices[k]):
      by_ref.update(zip([copy_of(v).ref() for v in pipe.cell_params[k].variables], pipe.sums[k].Read(token)))
  return by_ref


def MergeInputGrads(pipe, first, pad_rows):
  """The pipeline's input gradients (None for non-float leaves) from the executor's per-leaf TensorArrays."""
  with tf.device(pipe.devices[0]):
    return [None if a is None else microbatch.MergeStacked(a.stack(), pipe.params.batch_dim, pad_rows)
            for a in first]


def _Cells(pipe, params, padding, wanted):
  """(executor.Cells of the pipe's replica for a training step, the timeline recorder or None)."""
  recorder = timeline.Current()
  return pipe.functions.ExecutorCells(pipe.replica, params, True, padding, recorder is not None, wanted), recorder


def TrainFProp(pipe, inputs):
  """The outputs of the pipeline `pipe` in training under a fill-drain plan (GPipe): one custom
  gradient whose forward runs the plan's forward phase and whose gradient runs its backward phase
  (executor.py)."""
  if pipe.num_cells == 1 and pipe.num_micro_batches == 1:
    # Nothing to pipeline, and re-computing the one task would hold the same activations, only
    # later: the plain model, at plain speed, whatever the remat policy.
    return pipe.functions.RunAlone(pipe.replica, inputs)
  p = pipe.params
  flat_inputs = tf.nest.flatten(inputs)
  structure = {}
  # The backward runs when the caller asks for gradients, usually outside its StepSeed and Replica
  # blocks: re-enter them so the re-computation draws the forward's dropout masks.
  step_seed = context.StepSeedValue()
  # Inputs no tape watches (images, constant features) get no gradient: None, as for integer leaves.
  wanted = remat.WantedInputGrads(flat_inputs)

  @tf.custom_gradient
  def Pipeline(*args):
    outputs, forward = Forward(pipe, tf.nest.pack_sequence_as(inputs, list(args)), True, wanted)
    structure['outputs'] = outputs
    flat_outputs = tf.nest.flatten(outputs)

    def Grad(*dys, variables=None):
      with context.StepSeed(step_seed), context.Replica(pipe.replica):
        return Backward(dys, variables)

    def Backward(dys, variables):
      num_micro = forward.plan.num_micro_batches
      dy = tf.nest.pack_sequence_as(outputs, [
          phase_loop.Opaque(tf.zeros_like(o)) if g is None else g for g, o in zip(dys, flat_outputs)])
      cells, recorder = _Cells(pipe, forward.params, forward.padding, forward.wanted)
      with tf.device(pipe.devices[-1]):
        dy_micro, dy_stacked, _ = microbatch.Cut(dy, num_micro, p.batch_dim, p.pad)
      looped = forward.facts.loops[plan_lib.BACKWARD]
      first, summed = executor.Backward(forward.facts, cells, dy_micro, dy_stacked if looped else None, forward.kept,
                                        recorder=recorder, name=pipe.name)
      by_ref = _GradientsByVariable(pipe, summed)
      return (MergeInputGrads(pipe, first, forward.pad_rows),
              [by_ref.get(v.ref()) for v in (variables or [])])

    return flat_outputs, Grad

  flat_outputs = Pipeline(*flat_inputs)
  return tf.nest.pack_sequence_as(structure['outputs'], flat_outputs)


def _Float(t):
  return t.dtype.is_floating


def _FlatLoss(loss, metrics):
  """[loss, value, weight, ...] of (loss, {name: (value, weight)}), metrics by name: a custom gradient's outputs."""
  return [loss] + [t for name in sorted(metrics) for t in metrics[name]]


def _PackLoss(flat, like):
  """(loss, metrics) back from _FlatLoss's list, with the metric names of `like`."""
  return flat[0], {name: (flat[1 + 2 * i], flat[2 + 2 * i]) for i, name in enumerate(sorted(like))}


def _Interleaved(pipe, inputs, loss_inputs, loss_fn):
  """FPropWithLoss under a plan that interleaves forwards and backwards: loss_fn runs per
  micro-batch on the last cell's device, `loss_inputs` split into the same micro-batches along
  dimension 0 (see the module docstring)."""
  p = pipe.params
  if p.pad:
    raise errors.ConfigError('Layer %s: schedule %r does not pad batches yet; use a batch size that '
                             'num_micro_batches divides, or schedule=\'gpipe\'.' % (pipe.path, p.schedule))
  flat_inputs = tf.nest.flatten(inputs)
  structure = {}
  wanted = remat.WantedInputGrads(flat_inputs)  # None for inputs no tape watches, as in PipeliningLayer.FProp.

  @tf.custom_gradient
  def Pipeline(*args):
    x = tf.nest.pack_sequence_as(inputs, list(args))
    num_micro = pipe.num_micro_batches
    plan = schedule_lib.MakePlan(p.schedule, num_micro, pipe.num_cells, p.remat, pipe.num_devices)
    x, params = executor.CutFromCallerTapes(x, _ReadParams(pipe), pipe.devices)
    micro, _ = microbatch.Split(x, num_micro, p.batch_dim)
    loss_micro, _ = microbatch.Split(loss_inputs, num_micro, 0)
    parts, loss_grads = [], {}

    def Loss(m, outputs):
      flat = tf.nest.flatten(outputs)
      floats = [t for t in flat if _Float(t)]
      with tf.GradientTape() as tape:  # Also records the variables the loss reads (e.g. a softmax's).
        tape.watch(floats)
        loss, metrics = loss_fn(outputs, loss_micro[m])
        weight = tf.stop_gradient(tf.cast(metrics['loss'][1], loss.dtype)) if 'loss' in metrics else tf.ones(
            [], loss.dtype)
        scaled = loss * weight
      variables = [v for v in tape.watched_variables() if v.trainable]
      grads = tape.gradient(scaled, floats + variables)
      for v, g in zip(variables, grads[len(floats):]):
        if g is not None:
          g = tf.convert_to_tensor(g)
          loss_grads[v.ref()] = (v, loss_grads[v.ref()][1] + g if v.ref() in loss_grads else g)
      parts.append((loss, metrics, weight))
      upstream = iter(grads[:len(floats)])
      return tf.nest.pack_sequence_as(outputs, [
          (lambda g, t: tf.zeros_like(t) if g is None else g)(next(upstream), t) if _Float(t) else tf.zeros_like(t)
          for t in flat])

    cells, recorder = _Cells(pipe, params, None, wanted)
    facts = step_facts.Derive(plan, cells.saving, loop=False, loss=True)
    first, summed, moments = executor.Step(facts, cells, micro, Loss, recorder=recorder, name=pipe.name)
    _ApplyBatchNormMoments(pipe, moments)
    with tf.device(pipe.devices[-1]):
      # Micro-batches combine as data-parallel replicas do: means weighted by each part's weights.
      loss, metrics, _ = replicas.CombineReplicas([(l, m) for l, m, _ in parts])
      total = tf.add_n([w for _, _, w in parts])
    input_grads = MergeInputGrads(pipe, first, 0)
    by_ref = _GradientsByVariable(pipe, summed)
    for ref, (_, g) in loss_grads.items():  # The loss may read the pipeline's own variables (a weight penalty).
      by_ref[ref] = by_ref[ref] + g if by_ref.get(ref) is not None else g
    structure['metrics'] = metrics
    flat_out = _FlatLoss(loss, metrics)

    def Grad(dloss, *unused_dmetrics, variables=None):
      scale = tf.cast(dloss, loss.dtype) / total

      def Scaled(g):
        return None if g is None else g * tf.cast(scale, g.dtype)
      return [Scaled(g) for g in input_grads], [Scaled(by_ref.get(v.ref())) for v in (variables or [])]

    return flat_out, Grad

  with context.Training(True):
    flat_out = Pipeline(*flat_inputs)
  return _PackLoss(flat_out, structure['metrics'])


def LossOnDevice(device, outputs, loss_inputs, loss_fn):
  """(loss, metrics) of loss_fn(outputs, loss_inputs), forward and backward on `device`: for GPipe,
  the last cell's, where the outputs are. Left to the caller's placement, a step placed on the first
  cell (remote.Connect's mesh.Placement) copied the whole batch's outputs there and their gradient
  back, and the tape puts a gradient op under the scope of the tape.gradient call, not beside its
  forward op, so placing only the forward would leave its gradient there. The output gradient is
  split into micro-batches on that device too (PipeliningLayer). Variables the loss reads (a
  softmax, a weight penalty) get their gradients too."""
  flat = tf.nest.flatten(outputs)
  floats = [t for t in flat if _Float(t)]
  structure = {}

  @tf.custom_gradient
  def Loss(*float_outputs):
    it = iter(float_outputs)
    packed = tf.nest.pack_sequence_as(outputs, [next(it) if _Float(t) else t for t in flat])
    with tf.device(device):
      with tf.GradientTape(watch_accessed_variables=True) as tape:
        tape.watch(float_outputs)
        loss, metrics = loss_fn(packed, loss_inputs)
    structure['metrics'] = metrics
    flat_out = _FlatLoss(loss, metrics)

    def Grad(dloss, *unused_dmetrics, variables=None):
      variables = list(variables or [])
      with tf.device(device):
        grads = tape.gradient(loss, list(float_outputs) + variables, output_gradients=dloss)
      return grads[:len(float_outputs)], grads[len(float_outputs):]

    return flat_out, Grad

  return _PackLoss(Loss(*floats), structure['metrics'])
