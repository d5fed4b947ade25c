"""Benchmark workloads shared by the benchmark and timeline tools (a stack of layers and a batch for it), the
training step through FPropWithLoss they time, and the decomposition of a pipeline's speed-up that both benchmarks
report.

  dense        --layers ReLU layers of --width and a 10-way output layer (issue 15's workload A: 8 x 1024, batch 1024)
  transformer  Table 1's Transformer stack T(--layers, --hidden_dim, --heads), depth --model_dim, --batch x
               --seq_len tokens (the benchmark's T(8, 512, 4), d=128)
  conv         --layers 3x3 convolutions of --channels channels (ReLU), --batch images of --image_size squared

    parser = argparse.ArgumentParser(); workloads.AddFlags(parser); args = parser.parse_args()
    workload = workloads.FromArgs(args)   # .name, .layers (layer Params), .inputs (a batch)
"""

import collections


WORKLOADS = ('dense', 'transformer', 'conv')
DEFAULTS = {
    'dense': dict(layers=8, width=1024, batch=1024),
    'transformer': dict(layers=8, batch=64, seq_len=32, model_dim=128, hidden_dim=512, heads=4),
    'conv': dict(layers=8, batch=64, image_size=32, channels=32),
}

Workload = collections.namedtuple('Workload', 'name layers inputs')


def AddFlags(parser, default='dense', batch_list=False):
  """--workload and its sizes (each defaults to the workload's own, DEFAULTS); with batch_list, --batch is a
  comma-separated list of batch sizes (read with Batches)."""
  parser.add_argument('--workload', default=default, choices=WORKLOADS, help='The layer stack to run.')
  if batch_list:
    parser.add_argument('--batch', default=None, help='Examples per batch, a comma-separated list (each is run). '
                        'Default: the workload\'s own.')
  for flag, help_text in (('layers', 'Layers of the stack.'), ('batch', 'Examples per batch.'),
                          ('width', 'dense: layer width.'), ('seq_len', 'transformer: tokens per example.'),
                          ('model_dim', 'transformer: model depth.'),
                          ('hidden_dim', 'transformer: feed-forward depth.'),
                          ('heads', 'transformer: attention heads.'), ('image_size', 'conv: image height and width.'),
                          ('channels', 'conv: channels.')):
    if flag == 'batch' and batch_list:
      continue
    parser.add_argument('--' + flag, type=int, default=None, help=help_text + ' Default: the workload\'s own.')
  parser.add_argument('--dtype', default='float32', help='Compute dtype of the layers (their fprop_dtype; weights '
                      'stay float32): float32, bfloat16 or float16; a comma-separated list runs each.')


def Batches(args):
  """The batch sizes of a batch_list --batch."""
  return [int(b) for b in args.batch.split(',')] if args.batch else [DEFAULTS[args.workload]['batch']]


def Dtypes(args):
  """The compute dtypes of --dtype, in order."""
  return [d.strip() for d in getattr(args, 'dtype', 'float32').split(',') if d.strip()]


def FromArgs(args, batch=None, dtype=None):
  """The workload the flags describe (with `batch` instead of --batch, and `dtype` instead of --dtype's first,
  when given)."""
  sizes = {k: getattr(args, k) for k in DEFAULTS[args.workload]
           if k != 'batch' and getattr(args, k, None) is not None}
  sizes['dtype'] = dtype or Dtypes(args)[0]
  if batch is not None:
    sizes['batch'] = batch
  elif isinstance(getattr(args, 'batch', None), int):
    sizes['batch'] = args.batch
  return Make(args.workload, **sizes)


def SizeFlags(args):
  """The workload flags of `args` as a command line (to pass to a child process), --batch and --dtype left out."""
  flags = ['--workload=' + args.workload]
  for k in DEFAULTS[args.workload]:
    if k != 'batch' and getattr(args, k, None) is not None:
      flags.append('--%s=%d' % (k, getattr(args, k)))
  return flags


def Decomposition(plain_s, times, num_splits, micro_batches):
  """Per M, the speed-up of K cells over the plain model (no micro-batching) as a product of three factors:
  what running as a one-cell pipeline costs (plain / K=1,M=1 step time), the micro-batch efficiency of one device
  (K=1,M=1 / K=1,M: small micro-batches run slower per example) and the schedule's gain over one device at the same
  M (K=1,M / K,M, beside its ideal K*M/(M+K-1)). `times`: {'K=k,M=m': step seconds}. Prints the table."""
  k = num_splits
  one = times['K=1,M=1']
  print('%-4s %9s  = %13s x %13s x %12s %7s %7s' % ('M', 'vs plain', 'K=1,M=1/plain', 'micro-batch', 'K=%d/K=1' % k,
                                                    'ideal', 'ratio'))
  rows = {}
  for m in micro_batches:
    ideal = k * m / (m + k - 1)
    row = dict(speedup=plain_s / times['K=%d,M=%d' % (k, m)], overhead=plain_s / one,
               micro_batch_efficiency=one / times['K=1,M=%d' % m],
               schedule=times['K=1,M=%d' % m] / times['K=%d,M=%d' % (k, m)], ideal=ideal)
    row['schedule_ratio'] = row['schedule'] / ideal
    rows[m] = row
    print('%-4d %9.2f  = %13.2f x %13.2f x %12.2f %7.2f %7.2f' % (
        m, row['speedup'], row['overhead'], row['micro_batch_efficiency'], row['schedule'], ideal,
        row['schedule_ratio']), flush=True)
  return rows


def ScheduleByWorker(times, cpu, num_splits, micro_batches, op_cpu=None):
  """Per M, the schedule's gain (K=1,M / K,M step time) as a product of what the workers' CPU times show:
  K x work x balance x busy, where `work` is the CPU time K=1 spends on a step over what the K workers spend
  together (below 1: the pipeline adds work, e.g. hand-offs), `balance` the mean worker's CPU time over the busiest
  one's (the cells' imbalance), and `busy` the busiest worker's CPU time over the K-cell step time, over K=1's
  worker's over its own step time (what is left: the bubble and the waits). Its ideal is the bubble's alone,
  M/(M+K-1). `times`: {'K=k,M=m': step seconds}; `cpu`: {'K=k,M=m': [CPU seconds per step of each worker]}
  (K=1's: worker 0 holds its cell, the others idle). With `op_cpu`, the same for the workers' threads that run ops
  (handoff_cost.OpThreadCpuSeconds), the work the pipeline adds is split in two, as fractions of K=1's CPU time
  (1/work - 1 = extra_op + extra_other): on those threads, and on the others (gRPC's, the RPC handlers'). Prints
  the table; returns {M: row}."""
  k = num_splits
  print('%-4s %9s  = %d x %6s x %8s x %6s %11s' % ('M', 'K=%d/K=1' % k, k, 'work', 'balance', 'busy', 'ideal busy')
        + ('%11s %12s' % ('+ops CPU', '+other CPU') if op_cpu else ''))
  rows = {}
  for m in micro_batches:
    one, many = 'K=1,M=%d' % m, 'K=%d,M=%d' % (k, m)
    row = dict(schedule=times[one] / times[many], work=sum(cpu[one]) / sum(cpu[many]),
               balance=sum(cpu[many]) / k / max(cpu[many]),
               busy=(max(cpu[many]) / times[many]) / (sum(cpu[one]) / times[one]), ideal_busy=m / (m + k - 1))
    extra = ''
    if op_cpu:
      other = {key: sum(cpu[key]) - sum(op_cpu[key]) for key in (one, many)}  # gRPC's threads, the RPC handlers'.
      row['extra_op'] = (sum(op_cpu[many]) - sum(op_cpu[one])) / sum(cpu[one])
      row['extra_other'] = (other[many] - other[one]) / sum(cpu[one])
      extra = '%10.1f%% %11.1f%%' % (100 * row['extra_op'], 100 * row['extra_other'])
    rows[m] = row
    print('%-4d %9.2f  = %d x %6.2f x %8.2f x %6.2f %11.2f' % (m, row['schedule'], k, row['work'], row['balance'],
                                                            row['busy'], row['ideal_busy']) + extra, flush=True)
  return rows


def Make(workload, dtype='float32', **sizes):
  """The workload with `sizes` (DEFAULTS for those not given), its layers computing in `dtype` (their
  fprop_dtype; float32 weights) and its batch in that dtype."""
  return InDtype(_Make(workload, **sizes), dtype)


def InDtype(workload, dtype):
  """`workload` with its layers computing in `dtype` (their fprop_dtype) and its batch in it; float32: itself."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core import base_layer  # pylint: disable=g-import-not-at-top
  dtype = tf.as_dtype(dtype)
  if dtype == tf.float32:
    return workload
  return Workload('%s, %s' % (workload.name, dtype.name), [p.Copy().Set(fprop_dtype=dtype) for p in workload.layers],
                  base_layer.ToDtype(workload.inputs, dtype))


def TrainStep(pipe, targets):
  """A tf.function inputs -> (loss, gradients of `pipe`'s variables): a step of PipeliningLayer `pipe` through
  FPropWithLoss (the trainer's path for every schedule), the loss its outputs' squared sum per example."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core import context  # pylint: disable=g-import-not-at-top

  def SquaredOutputs(outputs, unused_targets):
    x = tf.cast(outputs.x if isinstance(outputs, dict) else outputs, tf.float32)
    rows = tf.cast(tf.shape(x)[0], tf.float32)
    loss = tf.reduce_sum(tf.square(x)) / rows
    return loss, {'loss': (loss, rows)}

  @tf.function(autograph=False)
  def Step(inputs):
    with tf.GradientTape() as tape, context.Training(True):
      loss, _ = pipe.FPropWithLoss(inputs, targets, SquaredOutputs)
    return loss, tape.gradient(loss, pipe.trainable_variables)

  return Step


def _Make(workload, **sizes):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.core.nested_map import NestedMap  # pylint: disable=g-import-not-at-top
  from lingpipe.layers import conv  # pylint: disable=g-import-not-at-top
  from lingpipe.layers import linear  # pylint: disable=g-import-not-at-top
  from lingpipe.layers import transformer  # pylint: disable=g-import-not-at-top
  s = dict(DEFAULTS[workload], **sizes)
  rng = np.random.RandomState(0)
  if workload == 'dense':
    layers = [linear.ProjectionLayer.Params().Set(input_dim=s['width'], output_dim=s['width'], activation='relu')
              for _ in range(s['layers'])]
    layers.append(linear.ProjectionLayer.Params().Set(input_dim=s['width'], output_dim=10))
    inputs = tf.constant(rng.normal(size=(s['batch'], s['width'])), tf.float32)
    return Workload('dense %d x %d + 10, batch %d' % (s['layers'], s['width'], s['batch']), layers, inputs)
  if workload == 'transformer':
    layer = transformer.TransformerLayer.Params().Set(model_dim=s['model_dim'], hidden_dim=s['hidden_dim'],
                                                      num_heads=s['heads'])
    inputs = NestedMap(x=tf.constant(rng.normal(size=(s['batch'], s['seq_len'], s['model_dim'])), tf.float32),
                       paddings=tf.zeros([s['batch'], s['seq_len']]))
    return Workload('transformer T(%d,%d,%d) d=%d, batch %dx%d' % (
        s['layers'], s['hidden_dim'], s['heads'], s['model_dim'], s['batch'], s['seq_len']),
                    [layer.Copy() for _ in range(s['layers'])], inputs)
  if workload == 'conv':
    layer = conv.Conv2DLayer.Params().Set(filter_shape=(3, 3, s['channels'], s['channels']), activation='relu')
    inputs = tf.constant(rng.normal(size=(s['batch'], s['image_size'], s['image_size'], s['channels'])), tf.float32)
    return Workload('conv %d x 3x3x%d, batch %d of %dx%d' % (s['layers'], s['channels'], s['batch'],
                                                           s['image_size'], s['image_size']),
                    [layer.Copy() for _ in range(s['layers'])], inputs)
  raise ValueError('Unknown workload %r; expected one of %s.' % (workload, ', '.join(WORKLOADS)))
