"""The operations of an AmoebaNet cell as TensorFlow's reference builds them (tensorflow/tpu, amoeba_net/
network_utils.py), and drop-path: each operation's output, except an identity's, dropped whole per example."""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import param_checks
from lingpipe.layers import batch_norm
from lingpipe.layers import conv
from lingpipe.layers import dropout
from lingpipe.layers import pooling
from lingpipe.layers import sequential
from lingpipe.tasks.image import amoebanet_specs as specs
from lingpipe.tasks.image.conv_bn import ConvBn


def ReluConvBn(filter_shape, filter_stride=(1, 1), bn_tpl=None, separable=False):
  """Params of relu -> conv (no bias; depthwise-separable if `separable`) -> batch norm."""
  return ConvBn.Params().Set(filter_shape=filter_shape, filter_stride=filter_stride, relu='before',
                             separable=separable, bn_tpl=bn_tpl or batch_norm.BatchNormLayer.Params())


class FactorizedReduce(base_layer.BaseLayer):
  """relu, then two strided 1x1 convolutions, one on the image shifted by a pixel, concatenated; batch norm."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Input channels.')
    p.Define('output_dim', 0, 'Output channels (even).')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Batch norm template (dim is set here).')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.output_dim % 2:
      raise errors.ConfigError('Layer %s: output_dim must be even, got %d.' % (self.path, p.output_dim))
    half = conv.Conv2DLayer.Params().Set(filter_shape=(1, 1, p.input_dim, p.output_dim // 2), filter_stride=(2, 2))
    self.CreateChild('conv1', half)
    self.CreateChild('conv2', half)
    self.CreateChild('bn', p.bn_tpl.Copy().Set(dim=p.output_dim))

  def FProp(self, inputs):
    x = tf.nn.relu(inputs)
    # tf.slice, not x[:, 1:, 1:]: on CPU the strided slice's gradient kernel took 11% of the op time of half an
    # AmoebaNet-D's forward and backward (profiled); the slice's gradient is a pad, and the step is 7% faster.
    shifted = tf.pad(tf.slice(x, [0, 1, 1, 0], [-1, -1, -1, -1]), [[0, 0], [0, 1], [0, 1], [0, 0]])
    return self.bn.FProp(tf.concat([self.conv1.FProp(x), self.conv2.FProp(shifted)], axis=-1))

  @classmethod
  def FPropMeta(cls, params, input_shape):
    n, h, w, _ = tf.TensorShape(input_shape).as_list()
    out = [n, -(-h // 2) if h else None, -(-w // 2) if w else None, params.output_dim]
    return base_layer.Meta(out, 2 * (n or 0) * (out[1] or 0) * (out[2] or 0) * params.input_dim *
                           params.output_dim)


class DropPath(base_layer.BaseLayer):
  """In training, zeroes each example's whole input with probability 1 - keep and scales the rest by 1 / keep.

  keep falls from 1 to keep_prob over the first burn_in_steps steps (the step is the step seed, context.StepSeed;
  the reference's drop_connect_version 'v1'), and stays there. The mask is drawn from (layer, step seed,
  micro-batch, replica) with stateless ops, so a re-computed forward drops the same examples.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('keep_prob', 1.0, 'Keep probability once burnt in; 1.0 disables drop-path.',
             check=param_checks.Float(0.0, 1.0, low_open=True))
    p.Define('burn_in_steps', 0, 'Steps over which keep falls linearly from 1 to keep_prob (0: keep_prob at once).',
             check=param_checks.Int(0))
    return p

  def KeepProb(self):
    """This step's keep probability (a float32 scalar)."""
    p = self.params
    step = context.StepSeedValue()
    if not p.burn_in_steps or step is None:
      return tf.constant(p.keep_prob, tf.float32)
    ratio = tf.minimum(1.0, tf.cast(step, tf.float32) / float(p.burn_in_steps))
    return 1.0 - ratio * (1.0 - p.keep_prob)

  def FProp(self, inputs):
    p = self.params
    if not context.IsTraining() or p.keep_prob == 1.0:
      return inputs
    keep = self.KeepProb()
    shape = tf.concat([tf.shape(inputs)[:1], tf.ones([inputs.shape.rank - 1], tf.int32)], 0)
    # float32 draws in any compute dtype.
    mask = tf.floor(keep + tf.random.stateless_uniform(shape, seed=dropout.MaskSeed(self)))
    return inputs * tf.cast(mask / keep, inputs.dtype)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta(input_shape, 2 * (input_shape.num_elements() or 0))


def OperationParams(name, input_dim, channels, stride, bn_tpl=None, drop_path_tpl=None):
  """Layer Params of genotype operation `name` from `input_dim` to `channels` channels (None: the identity), as
  the reference builds it: the identity becomes a strided 1x1 convolution where it must change the size, a pooling
  is followed by a 1x1 convolution where it must change the channels, and 3x3 and 1x7_7x1 run at channels / 4
  between two 1x1 convolutions. With `drop_path_tpl` (DropPath Params), every operation but 'none' ends in it."""
  c, q = channels, channels // 4
  bn_tpl = bn_tpl or batch_norm.BatchNormLayer.Params()

  def Rcb(kh, kw, cin, cout, sh=1, sw=1, separable=False):
    return ReluConvBn((kh, kw, cin, cout), (sh, sw), bn_tpl, separable)

  def Seq(*subs):
    return sequential.SequentialLayer.Params().Set(sub=list(subs))

  if name in ('none', '1x1'):
    op = Rcb(1, 1, input_dim, c, stride, stride) if stride > 1 or name == '1x1' or input_dim != c else None
  elif 'pool' in name:
    kind, window = name.split('_')[0].upper(), int(name.split('x')[-1])
    op = pooling.Pooling2DLayer.Params().Set(window_shape=(window, window), window_stride=(stride, stride),
                                             padding='SAME', pooling_type=kind)
    if input_dim != c:
      op = Seq(op, ConvBn.Params().Set(filter_shape=(1, 1, input_dim, c), relu='none', bn_tpl=bn_tpl))
  elif name == '3x3':
    op = Seq(Rcb(1, 1, input_dim, q), Rcb(3, 3, q, q, stride, stride), Rcb(1, 1, q, c))
  elif name == '1x7_7x1':
    op = Seq(Rcb(1, 1, input_dim, q), Rcb(1, 7, q, q, 1, stride), Rcb(7, 1, q, q, stride, 1), Rcb(1, 1, q, c))
  elif 'separable' in name:
    layers, k = specs.SeparableInfo(name)
    op = Seq(*[Rcb(k, k, input_dim if i == 0 else c, c, stride if i == 0 else 1, stride if i == 0 else 1, True)
               for i in range(layers)])
  else:
    raise errors.ConfigError('Unknown AmoebaNet operation %r; expected one of %s.%s' % (
        name, ', '.join(specs.OPERATIONS), errors.DidYouMean(name, specs.OPERATIONS)))
  if op is not None and name != 'none' and drop_path_tpl is not None and drop_path_tpl.keep_prob < 1.0:
    op = Seq(op, drop_path_tpl.Copy())
  return op
