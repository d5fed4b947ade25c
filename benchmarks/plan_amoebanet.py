r"""The memory planner and its speed model against the GPipe paper's AmoebaNet-D (Huang et al. 2019, Table 1).

    python benchmarks/plan_amoebanet.py                      # the largest model per column
    python benchmarks/plan_amoebanet.py --sections=speed     # measures layer times: ~15 minutes

Memory (section `memory`). The paper's columns: 8 GB accelerators, 224 x 224 images, batches of 128, and the
largest AmoebaNet-D(L, F) that fits: without GPipe (naive, K=1), with re-materialization on one accelerator, and on
2, 4 and 8 partitions. For each column this tool keeps the paper's L and asks the planner
(lingpipe/gpipe/planner/memory_plan.py) for the largest F (a multiple of --filters_step) whose fullest device fits, over
M in --micro_batches (naive: M=1, no re-computation), with the cells cut to balance flops (GPipe's partitioning
balances estimated cost). Activations are the planner's: what each layer's backward reads, traced, in --fprop_dtype
(bfloat16 by default, as on the paper's TPUs), kept as a fusing compiler keeps them (--kept=fused; XLA, as the
paper) or as TensorFlow's executor does (--kept=tensorflow). Weights are counted two ways:

    paper     12 bytes per parameter, as the paper's Table 1 counts them (float32 weights, gradients and one
              RMSProp slot)
    lingpipe  what lingpipe's runtime holds: float32 weights, their compute copies, gradients and a cell's
              second gradients while they are summed, and --optimizer_slots slots

The softmax (F' x 1001) is on the last device. The auxiliary head is left out, as in the paper's counts.

Speed (section `speed`). The paper's Table 1 throughput for AmoebaNet-D (normalized to K=2, M=1; 3.48 at K=8,
M=32) against the planner's prediction from flops and from measured layer times (layer_times.py: each distinct
layer run traced on this machine at the micro-batch's size). The model is AmoebaNet-D(--speed_cells,
--speed_filters) at 224 x 224, batch --speed_batch; a layer's time on a whole batch of 128 is taken as 4 times
its time on 32 (so that the largest measured batch is 32). Then, to validate the measured model here, a small
AmoebaNet-D is timed as a real PipeliningLayer (K=1, where no two devices share this machine's cores) beside its
prediction.
"""

import argparse
import statistics
import time


# Table 1: (column, L, K, remat, the paper's F and parameters).
COLUMNS = (('naive-1', 18, 1, 'never', 208, 82e6), ('pipeline-1', 18, 1, 'always', 416, 318e6),
           ('pipeline-2', 18, 2, 'always', 544, 542e6), ('pipeline-4', 36, 4, 'always', 544, 1.05e9),
           ('pipeline-8', 72, 8, 'always', 512, 1.8e9))
# Table 1's normalized AmoebaNet throughput (K, M): the paper's TPU figures.
PAPER_SPEED = {(2, 1): 1.0, (4, 1): 1.13, (8, 1): 1.38, (2, 4): 1.07, (4, 4): 1.26, (8, 4): 1.72, (2, 32): 1.21,
               (4, 32): 1.84, (8, 32): 3.48}
NUM_CLASSES = 1001
# The paper's peak activation memory of its naive-1 and pipeline-1 models (its section 3).
PAPER_ACTIVATIONS = {'naive-1': 6.26e9, 'pipeline-1': 3.46e9}


def _Args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sections', default='memory', help='Comma-separated: memory, speed.')
  parser.add_argument('--device_memory', default='8GiB', help='Memory of one accelerator.')
  parser.add_argument('--accounting', default='paper,lingpipe', help='Weights counted as: paper, lingpipe.')
  parser.add_argument('--optimizer_slots', type=int, default=2, help="lingpipe's slots (RMSProp with momentum: 2).")
  parser.add_argument('--fprop_dtype', default='bfloat16', choices=('float32', 'bfloat16'))
  parser.add_argument('--kept', default='fused', choices=('fused', 'tensorflow'))
  parser.add_argument('--micro_batches', default='1,2,4,8,16,32', help='Values of M for the pipelined columns.')
  parser.add_argument('--batch', type=int, default=128)
  parser.add_argument('--image_size', type=int, default=224)
  parser.add_argument('--filters_step', type=int, default=8)
  parser.add_argument('--speed_cells', type=int, default=18)
  parser.add_argument('--speed_filters', type=int, default=256)
  parser.add_argument('--speed_batch', type=int, default=128)
  parser.add_argument('--repeats', type=int, default=2, help='Timed runs of each layer (the fastest is kept).')
  parser.add_argument('--write_docs', action='store_true', help='Write the tables into docs/benchmarks.md.')
  return parser.parse_args(argv)


def Layers(num_cells, filters, image_size):
  """AmoebaNet-D(num_cells, filters) as the registered ImageNet models build it, without auxiliary head; and the
  softmax's parameters."""
  from lingpipe.layers import batch_norm  # pylint: disable=g-import-not-at-top
  from lingpipe.tasks.image import amoebanet  # pylint: disable=g-import-not-at-top
  layers, feature_dim = amoebanet.AmoebaNetLayers(
      num_cells, filters, batch_norm.BatchNormLayer.Params().Set(decay=0.9997, epsilon=1e-3), genotype='D',
      stem='imagenet', image_size=image_size, num_classes=0)
  return list(layers), feature_dim * NUM_CLASSES + NUM_CLASSES


class Planner:
  """The planner's view of AmoebaNet-D(L, F) at the paper's set-up, described once per (L, F)."""

  def __init__(self, args):
    self.args = args
    self.described = {}

  def Describe(self, num_cells, filters):
    from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
    a = self.args
    if (num_cells, filters) not in self.described:
      layers, softmax = Layers(num_cells, filters, a.image_size)
      described = memory_plan.DescribeLayers(layers, [a.batch, a.image_size, a.image_size, 3],
                                             fused=a.kept == 'fused', fprop_dtype=a.fprop_dtype)
      self.described[(num_cells, filters)] = (described, softmax)
    return self.described[(num_cells, filters)]

  def Peak(self, num_cells, filters, k, remat, micro_batches, accounting):
    """(bytes of the fullest device, M) at the M of `micro_batches` that needs least."""
    from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
    from lingpipe.gpipe.planner import partition  # pylint: disable=g-import-not-at-top
    layers, softmax = self.Describe(num_cells, filters)
    counts = partition.BalanceByCost(list(layers.flops), k)
    bounds = [sum(counts[:i]) for i in range(k + 1)]
    best = None
    for m in micro_batches:
      cells = memory_plan.CellMemories(layers, counts, m, remat, slots=self.args.optimizer_slots)
      if accounting == 'paper':
        peaks = [12 * (sum(layers.params[bounds[i]:bounds[i + 1]]) + (softmax if i == k - 1 else 0)) + c.stash +
                 c.working for i, c in enumerate(cells)]
      else:  # The softmax as its device's layers are held, per parameter.
        last = cells[-1]
        per_param = (last.weights + last.copies + last.gradients + last.slots) / max(last.weights / 4, 1)
        peaks = [c.peak + (softmax * per_param if i == k - 1 else 0) for i, c in enumerate(cells)]
      if best is None or max(peaks) < best[0]:
        best = (max(peaks), m)
    return best

  def Params(self, num_cells, filters):
    layers, softmax = self.Describe(num_cells, filters)
    return sum(layers.params) + softmax

  def Largest(self, num_cells, k, remat, micro_batches, accounting, memory):
    """(F, M, peak) of the widest AmoebaNet-D(num_cells, F) that fits `memory`, F a multiple of filters_step."""
    step = self.args.filters_step

    def Fits(f):
      return self.Peak(num_cells, f, k, remat, micro_batches, accounting)[0] <= memory
    lo, hi = 4 * step, 4 * step
    if not Fits(lo):
      return None
    while Fits(hi):
      lo, hi = hi, hi * 2
    while hi - lo > step:
      mid = (lo + hi) // (2 * step) * step
      lo, hi = (mid, hi) if Fits(mid) else (lo, mid)
    peak, m = self.Peak(num_cells, lo, k, remat, micro_batches, accounting)
    return lo, m, peak


def MemorySection(args):
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  memory = memory_plan.ParseBytes(args.device_memory)
  micro = [int(m) for m in args.micro_batches.split(',') if m and args.batch % int(m) == 0]
  planner = Planner(args)
  print('\n## AmoebaNet-D at %d x %d, batch %d, %s accelerators: the largest F per column (activations in %s, '
        'kept %s; cells cut by flops)' % (args.image_size, args.image_size, args.batch, args.device_memory,
                                          args.fprop_dtype, args.kept))
  print('%-10s %-11s %3s %-7s %6s %4s %11s %9s %11s %7s' % ('weights', 'column', 'K', 'remat', 'F', 'M', 'parameters',
                                                           'peak GiB', 'paper', 'ratio'))
  results = {}
  for accounting in [a for a in args.accounting.split(',') if a]:
    for column, num_cells, k, remat, _, paper in COLUMNS:
      found = planner.Largest(num_cells, k, remat, [1] if remat == 'never' else micro, accounting, memory)
      if found is None:
        print('%-10s %-11s %3d %-7s  nothing fits' % (accounting, column, k, remat))
        continue
      filters, m, peak = found
      params = planner.Params(num_cells, filters)
      results[(accounting, column)] = dict(filters=filters, micro_batches=m, params=params, ratio=params / paper)
      print('%-10s %-11s %3d %-7s %6s %4d %10.0fM %9.2f %10.0fM %7.2f' % (
          accounting, column, k, remat, '(%d,%d)' % (num_cells, filters), m, params / 1e6, peak / 2**30,
          paper / 1e6, params / paper), flush=True)
  PaperModels(planner, micro)
  return results


def PaperModels(planner, micro):
  """The planner's activations of the paper's own naive-1 and pipeline-1 models beside the paper's figures."""
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  print('\nThe paper\'s own models: the planner\'s activation memory (stash and working set of the fullest device) '
        'against the paper\'s peak activation memory')
  for column, num_cells, k, remat, filters, _ in COLUMNS[:2]:
    layers, _ = planner.Describe(num_cells, filters)
    paper = PAPER_ACTIVATIONS[column]
    cells = {m: memory_plan.CellMemories(layers, [len(layers.params)], m, remat)[0]
             for m in ([1] if remat == 'never' else micro)}
    print('%-11s (%d,%d): paper %.2f GB; planner %s' % (column, num_cells, filters, paper / 1e9, ', '.join(
        'M=%d %.2f GB' % (m, (c.stash + c.working) / 1e9) for m, c in cells.items())))


def MeasuredSpeedups(layers, input_shapes, batch, ks, ms, times):
  """{(K, M): (flops prediction, measured-times prediction)} of GPipe with remat 'always', cells cut by flops."""
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import partition  # pylint: disable=g-import-not-at-top
  described = memory_plan.DescribeLayers(layers, input_shapes, trace=False)
  out = {}
  for k in ks:
    counts = partition.BalanceByCost(list(described.flops), k)
    for m in ms:
      out[(k, m)] = (memory_plan.PredictedSpeedup(described, counts, m, 'always'),
                     memory_plan.PredictedSpeedup(described, counts, m, 'always', batch_times=times[batch],
                                                  micro_times=times[batch // m]))
  return out


def _Scaled(times, factor, batch_size):
  from lingpipe.gpipe.planner import layer_times  # pylint: disable=g-import-not-at-top
  return layer_times.Times(batch_size, tuple(t * factor for t in times.forward),
                           tuple(t * factor for t in times.backward))


def SpeedSection(args):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import layer_times  # pylint: disable=g-import-not-at-top
  a = args
  layers, _ = Layers(a.speed_cells, a.speed_filters, a.image_size)
  shapes = [a.speed_batch, a.image_size, a.image_size, 3]
  ms = (1, 4, 32)
  sizes = sorted({a.speed_batch // m for m in ms})
  times, started = {}, time.time()
  for size in sizes:
    measured = min(size, 32)  # Larger batches: 32's time, scaled (the docstring).
    if measured not in times:
      times[measured] = layer_times.Measure(layers, shapes, measured, dtype=tf.float32, repeats=a.repeats)
    times[size] = times[measured] if size == measured else _Scaled(times[measured], size / measured, size)
  print('\n## AmoebaNet-D(%d, %d) at %d x %d, batch %d: throughput normalized to K=2, M=1 (GPipe, remat always, '
        'cells cut by flops); layer times measured here at batch %s in %.0f s' % (
            a.speed_cells, a.speed_filters, a.image_size, a.image_size, a.speed_batch,
            ', '.join(str(s) for s in sorted({min(s, 32) for s in sizes})), time.time() - started))
  predicted = MeasuredSpeedups(layers, shapes, a.speed_batch, (2, 4, 8), ms, times)
  base_flops, base_times = predicted[(2, 1)]
  print('%4s %4s %8s %14s %16s' % ('K', 'M', 'paper', 'flops model', 'measured times'))
  rows = {}
  for m in ms:
    for k in (2, 4, 8):
      by_flops, by_times = predicted[(k, m)][0] / base_flops, predicted[(k, m)][1] / base_times
      rows[(k, m)] = dict(paper=PAPER_SPEED[(k, m)], flops=by_flops, times=by_times)
      print('%4d %4d %8.2f %14.2f %16.2f' % (k, m, PAPER_SPEED[(k, m)], by_flops, by_times))
  return rows, Validate(a)


def _Step(layer, inputs):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core import context  # pylint: disable=g-import-not-at-top

  @tf.function(autograph=False)
  def Step(x):
    with tf.GradientTape() as tape:
      with context.Training(True):
        out = layer.FProp(x)
      loss = tf.add_n([tf.reduce_mean(tf.cast(t, tf.float32)) for t in tf.nest.flatten(out)
                       if t.dtype.is_floating])
    return loss, tape.gradient(loss, layer.trainable_variables)

  return lambda: tf.nest.map_structure(lambda t: t.numpy(), Step(inputs))


def Validate(args, num_cells=6, filters=32, image_size=64, batch=32, rounds=7):
  """Measured against predicted step of a small AmoebaNet-D as a real PipeliningLayer, K=1, against the plain
  model: what the measured-times model adds over flops (small micro-batches, re-computation) checked here."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import layer_times  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  from lingpipe.layers import sequential  # pylint: disable=g-import-not-at-top
  layers, _ = Layers(num_cells, filters, image_size)
  shapes = [batch, image_size, image_size, 3]
  inputs = tf.random.stateless_normal(shapes, seed=[1, 2])
  configs = {'plain': None, 'M=4 always': (4, 'always'), 'M=8 always': (8, 'always'), 'M=8 never': (8, 'never')}
  steps = {}
  for name, config in configs.items():
    if config is None:
      layer = sequential.SequentialLayer.Params().Set(name='plain', sub=[l.Copy() for l in layers]).Instantiate()
    else:
      layer = pipelining_layer.PipeliningLayer.Params().Set(
          name='pipe_%s' % name.replace(' ', '_').replace('=', '').lower(), layers=[l.Copy() for l in layers],
          num_splits=1, num_micro_batches=config[0], remat=config[1]).Instantiate()
    steps[name] = _Step(layer, inputs)
    steps[name]()
    steps[name]()
  seconds = {name: [] for name in steps}
  for _ in range(rounds):  # In alternation, so that a change in the machine's speed reaches all alike.
    for name, step in steps.items():
      start = time.perf_counter()
      step()
      seconds[name].append(time.perf_counter() - start)
  measured = {name: statistics.median(s) for name, s in seconds.items()}
  times = {b: layer_times.Measure(layers, shapes, b, repeats=args.repeats) for b in (batch, batch // 4, batch // 8)}
  described = memory_plan.DescribeLayers(layers, shapes, trace=False)
  print('\n## Validation here: AmoebaNet-D(%d, %d) at %d x %d, batch %d, as a PipeliningLayer with K=1: step '
        'time over the plain model\'s' % (num_cells, filters, image_size, image_size, batch))
  print('%-12s %10s %14s %16s' % ('config', 'measured', 'flops model', 'measured times'))
  rows = {}
  for name, config in configs.items():
    if config is None:
      continue
    m, remat = config
    by_flops = 1 / memory_plan.PredictedSpeedup(described, [len(layers)], m, remat)
    by_times = 1 / memory_plan.PredictedSpeedup(described, [len(layers)], m, remat, batch_times=times[batch],
                                                micro_times=times[batch // m])
    rows[name] = dict(measured=measured[name] / measured['plain'], flops=by_flops, times=by_times)
    print('%-12s %10.2f %14.2f %16.2f' % (name, rows[name]['measured'], by_flops, by_times))
  return rows


def main(argv=None):
  args = _Args(argv)
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  import benchmark_page  # pylint: disable=g-import-not-at-top
  binary.QuietTool()
  sections = [s for s in args.sections.split(',') if s]
  unknown = [s for s in sections if s not in ('memory', 'speed')]
  if unknown:
    raise SystemExit('Unknown --sections %s; expected memory, speed.' % ', '.join(unknown))
  print('CPU: %s' % cpu_kernels.DescribeCpu(), flush=True)
  commit = benchmark_page.Commit()
  results = {}
  with benchmark_page.Recording() as recording:
    if 'memory' in sections:
      results['memory'] = MemorySection(args)
    if 'speed' in sections:
      results['speed'] = SpeedSection(args)
  if args.write_docs:
    benchmark_page.Write('The planner against the GPipe paper\'s AmoebaNet-D (Table 1)', recording.Text(),
                         cpu_kernels.DescribeCpu(), commit=commit)
  return results


if __name__ == '__main__':
  main()
