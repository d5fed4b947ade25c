"""Benchmark workloads shared by the benchmark and timeline tools: a stack of layers and a batch for it.

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


def AddFlags(parser, default='dense'):
  """--workload and its sizes (each defaults to the workload's own, DEFAULTS)."""
  parser.add_argument('--workload', default=default, choices=WORKLOADS, help='The layer stack to run.')
  for flag, help_text in (('layers', 'Layers of the stack.'), ('batch', 'Examples per batch.'),
                          ('width', 'dense: layer width.'), ('seq_len', 'transformer: tokens per example.'),
                          ('model_dim', 'transformer: model depth.'),
                          ('hidden_dim', 'transformer: feed-forward depth.'),
                          ('heads', 'transformer: attention heads.'), ('image_size', 'conv: image height and width.'),
                          ('channels', 'conv: channels.')):
    parser.add_argument('--' + flag, type=int, default=None, help=help_text + ' Default: the workload\'s own.')


def FromArgs(args):
  sizes = {k: getattr(args, k) for k in DEFAULTS[args.workload] if getattr(args, k, None) is not None}
  return Make(args.workload, **sizes)


def Make(workload, **sizes):
  """The workload with `sizes` (DEFAULTS for those not given)."""
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
