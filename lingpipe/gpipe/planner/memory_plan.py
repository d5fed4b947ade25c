"""Memory planner: a pipeline's per-device peak memory, bubble and step time, predicted before anything runs.

From the layers' FPropMeta (output shapes, flops) and parameter counts (built abstractly: no
memory), for a schedule, a remat policy, K cells and M micro-batches, each device k is predicted to
hold at its peak

    weights          W_k = params_k x dtype size (the master weights), and with a compute dtype (fprop_dtype) of
                     another size the compute copies the step reads them as, params_k x its size
    gradients        W_k, and while micro-batches are summed one layer's more: each backward adds a parameter's
                     gradient to the cell's sum as soon as it has it (gpipe/engine/gradient_sums.py)
    optimizer slots  slots x W_k (Adam 2, RMSProp 2, SGD 1: the optimizer's slot variables)
    stash            what the forward keeps for the backward, for the whole batch: its cell's input (remat
                     'always'), its input and its activations ('never'), the input and the last micro-batch's
                     activations ('except_last'; 'always' where the backward comes next, as the plan says:
                     schedule.KeepWhereBackwardFollows), each of its layers' inputs ('per_layer'); the last cell
                     also holds its outputs and their gradients.
                     Activations: each layer's output, and what its backward reads from inside it (attention
                     probabilities, hidden units, masks), found by tracing the layer (saved_activations.py)
    working set      one micro-batch's backward: its re-computed activations (when re-computing, one layer's
                     under 'per_layer'; a split backward's are stash, held until its weight gradients) and the
                     gradients of the two largest layer outputs

and the step takes, in units of one forward flop (f_k: cell k's forward flops; backward 2 f_k,
re-computation f_k more), max_d sum_{k on d} (3 f_k + recomputed f_k) / (1 - bubble) against sum_k 3
f_k for the plain model on one device: the busiest device stretched by the schedule's bubble
(schedule.Bubble; (M+K-1)/M for fill-drain). Stash and in-flight micro-batches come from walking the
schedule's Plan, so every schedule is planned alike. Assumptions: a backward's transient temporaries
beyond the working set are not counted (nor the allocator's rounding), layers that cannot be traced
on float inputs (token ids) count their outputs alone, micro-batches cost their share of the flops
(small micro-batches are slower on real hardware; measure with benchmarks/pipeline_benchmark.py),
and in flops transfers are free. With measured times (step_time.py) a hand-off costs what the devices
measured (interleaved 1F1B makes vK-1 of them per micro-batch and pass instead of K-1).

`tools/plan_pipeline.py` prints the table for a registered model and recommends the fastest
configuration that fits; benchmarks/pipeline_benchmark.py's remat section prints the prediction
beside the measured peak.
"""

import functools
import itertools
from typing import List, NamedTuple, Tuple

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import byte_sizes
from lingpipe.core import errors
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe.engine import backward_kinds
from lingpipe.gpipe.planner import partition
from lingpipe.gpipe.planner import ranking
from lingpipe.gpipe.planner import saved_activations
from lingpipe.gpipe.planner import step_time


class Layers(NamedTuple):
  """What the planner knows of a flat list of layers, for one whole batch."""
  params: Tuple[int, ...]  # trainable parameters per layer
  flops: Tuple[float, ...]  # forward flops per layer
  out_bytes: Tuple[int, ...]  # bytes of each layer's output
  in_bytes: int  # bytes of the batch
  internal_bytes: Tuple[int, ...] = ()  # bytes each layer's backward reads from inside it (saved_activations.py)
  compute_size: int = 0  # bytes per element of activations and the weights' compute copies; 0: as the weights
  passed_on_bytes: Tuple[int, ...] = ()  # bytes of each layer's output that are its input handed on (one buffer)

  def Boundaries(self, lo, hi):
    """Bytes of the inputs of layers [lo + 1, hi): what a cell of layers [lo, hi) keeps beside its input under
    remat 'per_layer' (each buffer once)."""
    passed_on = sum(self.passed_on_bytes[lo:hi - 1]) if self.passed_on_bytes else 0
    return sum(self.out_bytes[lo:hi - 1]) - passed_on

  def Inside(self, lo, hi):
    """Bytes a backward of layers [lo, hi) reads but their input: their outputs, each buffer once,
    and what their backwards read from inside them."""
    internal = sum(self.internal_bytes[lo:hi]) if self.internal_bytes else 0
    passed_on = sum(self.passed_on_bytes[lo:hi]) if self.passed_on_bytes else 0
    return sum(self.out_bytes[lo:hi]) - passed_on + internal


class CellMemory(NamedTuple):
  """Predicted bytes on one device at its peak."""
  cell: int
  weights: int
  gradients: int
  slots: int
  stash: int
  working: int
  copies: int = 0  # the weights' compute copies (fprop_dtype), read once per step

  @property
  def peak(self):
    return self.weights + self.copies + self.gradients + self.slots + self.stash + self.working


class Candidate(NamedTuple):
  schedule: str
  remat: str
  num_splits: int  # K: devices
  num_micro_batches: int
  counts: Tuple[int, ...]  # layers per cell (K x virtual_stages cells)
  cells: Tuple[CellMemory, ...]  # per device
  bubble: float
  speedup: float  # predicted, against the plain model on one device
  virtual_stages: int = 1

  def Override(self, prefix='task.network'):
    """The --model_params_override text that selects this configuration."""
    text = ';'.join('%s.%s=%s' % (prefix, name, value) for name, value in [
        ('num_splits', self.num_splits), ('num_micro_batches', self.num_micro_batches), ('remat', self.remat),
        ('schedule', self.schedule)])
    return text + (';%s.virtual_stages=%d' % (prefix, self.virtual_stages) if self.virtual_stages > 1 else '')

  @property
  def peak(self):
    """The largest device's peak: what must fit in one device's memory."""
    return max(c.peak for c in self.cells)


# The planner asks for the plan of one configuration three times (memory, speed-up, bubble): build
# it once.
_Plan = functools.lru_cache(maxsize=256)(schedule_lib.MakePlan)


def Bytes(shapes, dtype_size):
  """Bytes of the tensors of `shapes` (a structure of TensorShapes)."""
  return sum((s.num_elements() or 0) * dtype_size for s in tf.nest.flatten(shapes) if isinstance(s, tf.TensorShape))


def _Shapes(input_shapes):
  if isinstance(input_shapes, dict):
    return {k: tf.TensorShape(v) for k, v in input_shapes.items()}
  return tf.TensorShape(input_shapes)


def DescribeLayers(layer_params, input_shapes, dtype_size=4, trace=True, fused=False, fprop_dtype=None):
  """Layers of `layer_params` (a flat list of layer Params) on a batch of `input_shapes` (a list, or
  a dict of lists for NestedMap inputs). Parameter counts come from an abstract build, which
  allocates nothing; with `trace`, what each layer's backward reads from inside it comes from
  tracing it (saved_activations.py), else only the layers' outputs are counted; with `fused`, what a
  fusing compiler would keep of it (Saved.fused_internal). Activations are counted in `fprop_dtype`
  (the layers compute in it, as in a pipeline whose fprop_dtype it is; None: the first layer's, else
  `dtype_size` bytes an element), and what a traced layer keeps in float32 (norm statistics, the
  softmax's logits) at 4 bytes an element."""
  if fprop_dtype is not None:
    fprop_dtype = tf.as_dtype(fprop_dtype)
    layer_params = [p.Copy().Set(fprop_dtype=p.fprop_dtype or fprop_dtype) for p in layer_params]
  compute = (fprop_dtype or layer_params[0].fprop_dtype) if layer_params else None
  act_size = compute.size if compute is not None else dtype_size
  if input_shapes is None:
    raise errors.ConfigError('The memory planner needs the input shapes of one batch: set the pipeline\'s '
                             'input_shapes (e.g. [batch, features]).')
  shapes = _Shapes(input_shapes)
  in_bytes = Bytes(shapes, act_size)
  params, flops, out_bytes, internal, passed_on = [], [], [], [], []
  for i, p in enumerate(layer_params):
    with base_layer.AbstractVariables():
      layer = p.Copy().Set(name=p.name or 'layer_%d' % i).Instantiate()
    params.append(base_layer.NumParams(layer))
    saved = saved_activations.Describe(p, shapes, compute or tf.float32) if trace else None
    traced = (saved.fused_internal if fused else saved.internal) if saved else 0
    # Traced in the compute dtype; without one, in float32 and scaled to dtype_size (a what-if of
    # another size).
    internal.append(traced if compute else traced * dtype_size // 4)
    passed_on.append((saved.passed_on if compute else saved.passed_on * dtype_size // 4) if saved else 0)
    meta = p.cls.FPropMeta(p, shapes)
    flops.append(float(meta.flops))
    shapes = meta.out_shapes[0]
    out_bytes.append(Bytes(shapes, act_size))
  return Layers(tuple(params), tuple(flops), tuple(out_bytes), in_bytes, tuple(internal),
                act_size if compute is not None else 0, tuple(passed_on))


def BatchSize(input_shapes, batch_dim=0):
  """The batch size of a pipeline's input_shapes (a list, or a dict of lists)."""
  shapes = list(input_shapes.values())[0] if isinstance(input_shapes, dict) else input_shapes
  return shapes[batch_dim]


def StepBytes(cells):
  """What a step adds to the weights on all the devices of one allocator (one process on CPU): the
  devices' weights' compute copies, gradients, stash and working sets summed."""
  return sum(c.copies + c.gradients + c.stash + c.working for c in cells)


def OptimizerSlots(optimizer_params):
  """Slot variables per trainable variable of an optimizer's Params (0 for none, e.g. in a benchmark step)."""
  if optimizer_params is None:
    return 0
  return len(getattr(optimizer_params.cls, '_SLOTS', ()))


def CellMemories(layers, counts, num_micro, remat, slots=0, dtype_size=4, schedule='gpipe', num_devices=None):
  """CellMemory of each device (`cell` is the device's index; one cell per device unless `schedule`
  is 'interleaved_1f1b' on `num_devices` devices) for the cut `counts` (layers per cell). What a
  device stashes at its peak comes from walking its actions in the schedule's Plan: each forward
  adds what it keeps for its micro- batch, each backward frees it. 'gpipe' keeps all M
  micro-batches; '1f1b' min(K-k, M) on cell k, but its gradient sums exist while forwards still run;
  'zero_bubble' holds each micro-batch's activations until its deferred weight gradients (the WEIGHT
  action), up to K micro-batches on every cell."""
  plan = _Plan(schedule, num_micro, len(counts), remat, num_devices)
  splits_backward = plan.splits_backward  # A walk of the plan: once.
  bounds = [0]
  for c in counts:
    bounds.append(bounds[-1] + c)
  kept, working, weights, ends, activations, copies = {}, {}, {}, {}, {}, {}
  copy_size = layers.compute_size if layers.compute_size not in (0, dtype_size) else 0
  for k in range(len(counts)):
    lo, hi = bounds[k], bounds[k + 1]
    weights[k] = sum(layers.params[lo:hi]) * dtype_size
    copies[k] = sum(layers.params[lo:hi]) * copy_size  # Read once per step in the compute dtype (cell_params.py).
    outs = layers.out_bytes[lo:hi]
    cell_in = layers.in_bytes if k == 0 else layers.out_bytes[lo - 1]
    inside = layers.Inside(lo, hi)  # What its backward reads, but its input.
    # Per micro-batch: what a forward keeps (its input; with its activations when taped), and the
    # backward's working set (re-computed activations, and the gradients of the two largest
    # outputs).
    activations[k] = (cell_in + inside) / num_micro
    kept[k] = {plan_lib.KEEP_INPUT: cell_in / num_micro, plan_lib.KEEP_ACTIVATIONS: activations[k]}
    if remat == 'per_layer':
      # Each layer's input alone (layer_remat.py); its backward re-computes one layer's activations at a time.
      kept[k][plan_lib.KEEP_ACTIVATIONS] = (cell_in + layers.Boundaries(lo, hi)) / num_micro
    if remat in ('except_last', 'always'):
      # A forward keeps its activations only where its backward comes next on its device (always:
      # the plan's KeepWhereBackwardFollows), so they are used (and freed) before anything is
      # re-computed: at most one micro-batch's at a time, counted once (below: `ends` for
      # except_last, the working set for always).
      kept[k][plan_lib.KEEP_ACTIVATIONS] = cell_in / num_micro
    # except_last: counted in `ends` below; a split backward's re-computed activations are stash
    # (held to the W).
    recomputed = inside / num_micro if remat == 'always' and not splits_backward else 0
    if remat == 'per_layer':
      recomputed = max(layers.Inside(i, i + 1) for i in range(lo, hi)) / num_micro
    working[k] = recomputed + sum(sorted(outs, reverse=True)[:2]) / num_micro
    ends[k] = inside / num_micro if remat == 'except_last' else 0  # The last micro-batch's activations.
    if k == len(counts) - 1:  # Its outputs and their gradients: stacked (gpipe), or one micro-batch's (loss inside).
      ends[k] += 2 * outs[-1] * (1 if schedule not in schedule_lib.NEEDS_LOSS else 1 / num_micro)
  # The executor's own strategies (a saved stack and a stored tape hold the same, so `saves` does
  # not matter).
  strategies = backward_kinds.Bind(plan, saves=False)
  devices = []
  for d in range(plan.num_devices):
    own = sorted({a.cell for a in plan.DeviceActions(d)})
    stash = peak = 0.0
    keeps = {}
    for a in plan.DeviceActions(d):
      strategy = strategies.get(a)
      if a.kind == plan_lib.FORWARD:
        keeps[(a.micro_batch, a.cell)] = kept[a.cell][a.keep]
        stash += keeps[(a.micro_batch, a.cell)]
        peak = max(peak, stash)
      elif a.kind == plan_lib.BACKWARD and strategy.holds_until_weight:
        # The deferred weight gradients read the activations: held from here (re-computed, or kept)
        # to the WEIGHT.
        stash += activations[a.cell] - keeps[(a.micro_batch, a.cell)]
        keeps[(a.micro_batch, a.cell)] = activations[a.cell]
        peak = max(peak, stash)
      elif a.kind in (plan_lib.BACKWARD, plan_lib.WEIGHT):
        stash -= keeps.pop((a.micro_batch, a.cell))
    w = sum(weights[k] for k in own)
    gradients = w  # One backward: its gradients are the sum.
    if num_micro > 1:
      # Each parameter's gradient is added to its cell's sum as soon as the backward has it, in every
      # kind of backward (gradient_sums.py): one layer's on top.
      gradients += max(max(layers.params[bounds[k]:bounds[k + 1]] or [0]) for k in own) * dtype_size
    devices.append(CellMemory(d, w, gradients, slots * w, int(peak + sum(ends[k] for k in own)),
                              int(max(working[k] for k in own)), sum(copies[k] for k in own)))
  return devices


def PredictedSpeedup(layers, counts, num_micro, remat, schedule='gpipe', num_devices=None, batch_times=None,
                     micro_times=None, terms=None):
  """Plain model's step over the pipeline's, the plan run action by action (step_time.Predict: a
  backward re-computes its forward where the plan says). The work is counted in flops (see the
  module docstring; a backward costs two forwards, a micro-batch 1/M of the batch) or, given
  layer_times.Times of the whole batch (`batch_times`: the plain model) and of one micro-batch
  (`micro_times`), in measured seconds, with this machine's step_time.Terms (`terms`, default
  none)."""
  plan = _Plan(schedule, num_micro, len(counts), remat, num_devices)
  if batch_times is None:  # In flops.
    whole = (tuple(layers.flops), tuple(2.0 * f for f in layers.flops))
    micro = tuple(tuple(t / num_micro for t in times) for times in whole)
    terms = step_time.IDEAL
  else:
    whole = (batch_times.forward, batch_times.backward)
    micro = (micro_times.forward, micro_times.backward)
    terms = terms or step_time.IDEAL
  plain = sum(whole[0]) + sum(whole[1]) + 2 * terms.per_action  # one forward and one backward call
  ends = list(itertools.accumulate(counts))
  handoff_bytes = [layers.out_bytes[end - 1] / num_micro for end in ends]  # each cell's result, one micro-batch
  pipelined = step_time.Predict(plan, *step_time.CellTimes(counts, *micro), terms=terms, handoff_bytes=handoff_bytes)
  return plain / pipelined if pipelined else 1.0


def Candidates(layer_params, input_shapes, num_devices, batch_size, micro_batches=None,
               remats=schedule_lib.REMAT_POLICIES, balance='flops', slots=0, dtype_size=4,
               schedules=schedule_lib.SCHEDULES, virtual_stages=(2,), fprop_dtype=None, times=None, terms=None):
  """Every (schedule, remat, K <= num_devices, M of `micro_batches` dividing batch_size; default
  MicroBatchChoices) configuration;
  'interleaved_1f1b' with each of `virtual_stages` cells per device (K x v cells at most the number
  of layers). `balance` a list: the layers per cell of one cut, planned for the K (and v) it fits;
  'time' with `times`: cut by the measured times. `times`: None (speed-ups from flops) or a function
  of a batch size returning layer_times.Times of the layers at that size (speed-ups from measured
  times, with this machine's step_time.Terms `terms`)."""
  layers = DescribeLayers(layer_params, input_shapes, dtype_size, fprop_dtype=fprop_dtype)
  micro_batches = MicroBatchChoices(batch_size) if micro_batches is None else micro_batches
  measured_costs = None
  if balance == 'time' and times is not None:  # Each layer's measured forward and backward at the whole batch.
    measured_costs = [f + b for f, b in zip(times(batch_size).forward, times(batch_size).backward)]
  elif balance in ('time', 'memory'):
    balance = 'flops'  # Those measure on a sample batch; the planner runs nothing.
  candidates = []
  for k in range(1, min(num_devices, len(layer_params)) + 1):
    for schedule in schedules:
      for v in virtual_stages if schedule == 'interleaved_1f1b' else (1,):
        num_cells = k * v
        given = isinstance(balance, (list, tuple))
        if (v > 1 and k == 1) or num_cells > len(layer_params) or (given and len(balance) != num_cells):
          continue
        if given:
          counts = partition.CheckBalance(balance, len(layer_params), num_cells)
        else:
          costs = measured_costs or {'uniform': [1] * len(layer_params), 'params': list(layers.params),
                                     'flops': list(layers.flops)}[balance]
          counts = partition.BalanceByCost(costs, num_cells)
        for m in micro_batches:
          if m > batch_size or batch_size % m:
            continue
          measured = {} if times is None else dict(batch_times=times(batch_size), micro_times=times(batch_size // m),
                                                   terms=terms)
          for remat in remats:
            cells = CellMemories(layers, counts, m, remat, slots, dtype_size, schedule, k)
            plan = _Plan(schedule, m, num_cells, remat, k)
            candidates.append(Candidate(schedule, remat, k, m, tuple(counts), tuple(cells), schedule_lib.Bubble(plan),
                                        PredictedSpeedup(layers, counts, m, remat, schedule, k, **measured), v))
  return candidates


def MicroBatchChoices(batch_size, largest=32):
  """The values of M every chooser considers: the divisors of the batch up to `largest`."""
  return tuple(m for m in range(1, min(batch_size, largest) + 1) if batch_size % m == 0)


def ProcessPeaks(candidate, process, one_process=False):
  """Each process's predicted peak (bytes) for `candidate`: `process`
  (memory/process_model.ProcessModel: what a process holds beyond its allocator) of each device's
  peak, every device its own process (lingpipe-workers), or with `one_process` of their sum (logical
  devices of one process share its allocator)."""
  if one_process:
    return [process.Peak(sum(cell.peak for cell in candidate.cells))]
  return [process.Peak(cell.peak) for cell in candidate.cells]


def ParseBytes(text):
  """'16GiB', '512MiB', '1.5GB', '1000' -> bytes (byte_sizes.Parse)."""
  return byte_sizes.Parse(text)


def Table(candidates, device_memory=None, peak_of=None) -> List[str]:
  """Lines of a table of the candidates: the fullest device's prediction, and with `peak_of` (a
  process's, e.g. ProcessPeaks) a column of it; whether it fits only against a `device_memory`
  given."""
  header = '%-21s %-12s %3s %4s  %-14s %10s %10s %10s %10s  %6s %8s' % (
      'schedule', 'remat', 'K', 'M', 'layers/cell', 'peak MiB', 'weights', 'stash', 'working', 'bubble',
      'speed-up')
  header += '  %12s' % 'process MiB' if peak_of else ''
  lines = [header + ('  fits' if device_memory else '')]
  for c in sorted(candidates, key=lambda c: (c.num_splits, c.num_micro_batches, c.remat)):
    big = max(c.cells, key=lambda cell: cell.peak)
    name = c.schedule + (' v=%d' % c.virtual_stages if c.virtual_stages > 1 else '')
    line = '%-21s %-12s %3d %4d  %-14s %10.1f %10.1f %10.1f %10.1f  %6.3f %8.2f' % (
        name, c.remat, c.num_splits, c.num_micro_batches, ','.join(map(str, c.counts))[:14],
        c.peak / 2**20, (big.weights + big.copies) / 2**20, big.stash / 2**20, big.working / 2**20, c.bubble,
        c.speedup)
    if peak_of:
      line += '  %12.1f' % (peak_of(c) / 2**20)
    if device_memory:
      line += '  %s' % ('yes' if ranking.Fits((peak_of or (lambda x: x.peak))(c), device_memory) else 'no')
    lines.append(line)
  return lines
