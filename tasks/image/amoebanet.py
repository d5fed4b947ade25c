"""AmoebaNet-D (Real et al. 2019) as a flat sequence of layers, for CIFAR-size images.

Every cell reads the two previous cells' outputs, so the state between layers is NestedMap(x=latest, prev=the one
before), and a PipeliningLayer can cut the sequence anywhere: both fields travel between pipeline cells.

The genotype is the one the GPipe paper and torchgpipe use (TensorFlow's reference AmoebaNet-D, whose normal
cell concatenates states [0, 3, 4, 6]; with it the paper's parameter counts are reproduced). AmoebaNet-D(L, D)
has L normal cells in total, L/3 per stack at resolutions 32, 16 and 8, two reduction cells between the stacks,
and D filters in the first stack (doubled by each reduction). For 32x32 inputs the stem is one 3x3 convolution
to D channels (ImageNet's strided stem and stem reduction cells are left out).
"""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import batch_norm
from lingpipe.layers import conv
from lingpipe.layers import pooling
from lingpipe.layers import sequential
from lingpipe.tasks.image.conv_bn import ConvBn

# (input state index, operation) pairs; each two consecutive ops make one new state (their sum).
NORMAL_OPERATIONS = [(1, 'conv_1x1'), (1, 'max_pool_3x3'), (1, 'none'), (0, 'conv_1x7_7x1'), (0, 'conv_1x1'),
                     (0, 'conv_1x7_7x1'), (2, 'max_pool_3x3'), (2, 'none'), (1, 'avg_pool_3x3'), (5, 'conv_1x1')]
NORMAL_CONCAT = [0, 3, 4, 6]
REDUCTION_OPERATIONS = [(0, 'max_pool_2x2'), (0, 'max_pool_3x3'), (2, 'none'), (1, 'conv_3x3'),
                        (2, 'conv_1x7_7x1'), (2, 'max_pool_3x3'), (3, 'none'), (1, 'max_pool_2x2'),
                        (2, 'avg_pool_3x3'), (3, 'conv_1x1')]
REDUCTION_CONCAT = [4, 5, 6]
OPERATIONS = ('none', 'avg_pool_3x3', 'max_pool_3x3', 'max_pool_2x2', 'conv_1x1', 'conv_3x3', 'conv_1x7_7x1')


def ReluConvBn(filter_shape, filter_stride=(1, 1), bn_tpl=None):
  """Params of relu -> conv (no bias) -> batch norm, AmoebaNet's building block."""
  return ConvBn.Params().Set(filter_shape=filter_shape, filter_stride=filter_stride, relu='before',
                             bn_tpl=bn_tpl or batch_norm.BatchNormLayer.Params())


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


def OperationParams(name, channels, stride, bn_tpl=None):
  """Layer Params of one genotype operation on `channels` channels (None for the identity)."""
  c = channels
  bn_tpl = bn_tpl or batch_norm.BatchNormLayer.Params()

  def Rcb(kh, kw, cin, cout, sh=1, sw=1):
    return ReluConvBn((kh, kw, cin, cout), (sh, sw), bn_tpl)

  def Pool(kind, window):
    return pooling.Pooling2DLayer.Params().Set(window_shape=(window, window), window_stride=(stride, stride),
                                               padding='SAME', pooling_type=kind)

  def Seq(*subs):
    return sequential.SequentialLayer.Params().Set(sub=list(subs))

  if name == 'none':
    return None if stride == 1 else FactorizedReduce.Params().Set(input_dim=c, output_dim=c, bn_tpl=bn_tpl)
  if name == 'avg_pool_3x3':
    return Pool('AVG', 3)
  if name == 'max_pool_3x3':
    return Pool('MAX', 3)
  if name == 'max_pool_2x2':
    return Pool('MAX', 2)
  if name == 'conv_1x1':
    return Seq(Rcb(1, 1, c, c, stride, stride))
  if name == 'conv_3x3':
    return Seq(Rcb(1, 1, c, c // 4), Rcb(3, 3, c // 4, c // 4, stride, stride), Rcb(1, 1, c // 4, c))
  if name == 'conv_1x7_7x1':
    return Seq(Rcb(1, 1, c, c // 4), Rcb(1, 7, c // 4, c // 4, 1, stride), Rcb(7, 1, c // 4, c // 4, stride, 1),
               Rcb(1, 1, c // 4, c))
  raise errors.ConfigError('Unknown AmoebaNet operation %r; expected one of %s.%s' % (
      name, ', '.join(OPERATIONS), errors.DidYouMean(name, OPERATIONS)))


class AmoebaCell(base_layer.BaseLayer):
  """One normal or reduction cell: NestedMap(x, prev) -> NestedMap(x=concat of chosen states, prev=x)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('channels_prev_prev', 0, 'Channels of inputs.prev.')
    p.Define('channels_prev', 0, 'Channels of inputs.x.')
    p.Define('channels', 0, 'Channels of every operation (the cell outputs channels * len(concat)).')
    p.Define('reduction', False, 'A reduction cell: ops on the inputs have stride 2.')
    p.Define('reduction_prev', False, 'The previous cell was a reduction cell (inputs.prev is twice as large).')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Template of every batch norm in the cell.')
    return p

  @staticmethod
  def Genotype(reduction):
    return (REDUCTION_OPERATIONS, REDUCTION_CONCAT) if reduction else (NORMAL_OPERATIONS, NORMAL_CONCAT)

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    c = p.channels
    self.CreateChild('reduce1', ReluConvBn((1, 1, p.channels_prev, c), bn_tpl=p.bn_tpl))
    if p.reduction_prev:
      self.CreateChild('reduce2', FactorizedReduce.Params().Set(input_dim=p.channels_prev_prev, output_dim=c,
                                                                bn_tpl=p.bn_tpl))
    elif p.channels_prev_prev != c:
      self.CreateChild('reduce2', ReluConvBn((1, 1, p.channels_prev_prev, c), bn_tpl=p.bn_tpl))
    operations, _ = self.Genotype(p.reduction)
    ops = []
    identity = []
    for index, name in operations:
      op = OperationParams(name, c, 2 if p.reduction and index < 2 else 1, p.bn_tpl)
      identity.append(op is None)
      ops.append(op)
    object.__setattr__(self, '_identity', identity)  # Plain state, not tracked by tf.Module.
    for i, op in enumerate(ops):
      if op is not None:
        self.CreateChild('op%d' % i, op)

  def FProp(self, inputs):
    p = self.params
    if not isinstance(inputs, dict) or 'x' not in inputs or 'prev' not in inputs:
      raise errors.ShapeError('Layer %s (AmoebaCell): inputs must be NestedMap(x, prev), got %s.' % (
          self.path, type(inputs).__name__))
    self.CheckInputShape(inputs['x'], rank=4, last_dim=p.channels_prev, arg='inputs.x')
    self.CheckInputShape(inputs['prev'], rank=4, last_dim=p.channels_prev_prev, arg='inputs.prev')
    s1 = self.reduce1.FProp(inputs['x'])
    s2 = self.reduce2.FProp(inputs['prev']) if 'reduce2' in self.children else inputs['prev']
    states = [s1, s2]
    operations, concat = self.Genotype(p.reduction)
    for i in range(0, len(operations), 2):
      pair = []
      for j in (i, i + 1):
        h = states[operations[j][0]]
        pair.append(h if self._identity[j] else getattr(self, 'op%d' % j).FProp(h))
      states.append(pair[0] + pair[1])
    return NestedMap(x=tf.concat([states[i] for i in concat], axis=-1), prev=inputs['x'])

  @classmethod
  def FPropMeta(cls, params, shapes):
    x = tf.TensorShape(shapes['x'])
    n, h, w, _ = x.as_list()
    c = params.channels
    operations, concat = cls.Genotype(params.reduction)
    flops = 2 * (n or 0) * (h or 0) * (w or 0) * (params.channels_prev + params.channels_prev_prev) * c
    in_shape = tf.TensorShape([n, h, w, c])
    for index, name in operations:
      op = OperationParams(name, c, 2 if params.reduction and index < 2 else 1)
      if op is not None:
        flops += op.cls.FPropMeta(op, in_shape).flops
    scale = 2 if params.reduction else 1
    out = [n, -(-h // scale) if h else None, -(-w // scale) if w else None, c * len(concat)]
    return base_layer.Meta(NestedMap(x=tf.TensorShape(out), prev=x), flops)


class Stem(base_layer.BaseLayer):
  """3x3 convolution to `channels` and batch norm; outputs NestedMap(x=s, prev=s) for the first cell."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('channels', 0, 'Output channels.')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Batch norm template (dim is set here).')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('conv', conv.Conv2DLayer.Params().Set(filter_shape=(3, 3, 3, self.params.channels)))
    self.CreateChild('bn', self.params.bn_tpl.Copy().Set(dim=self.params.channels))

  def FProp(self, images):
    s = self.bn.FProp(self.conv.FProp(images))
    return NestedMap(x=s, prev=s)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    meta = conv.Conv2DLayer.FPropMeta(conv.Conv2DLayer.Params().Set(filter_shape=(3, 3, 3, params.channels)),
                                      input_shape)
    return base_layer.Meta(NestedMap(x=meta.out_shapes[0], prev=meta.out_shapes[0]), meta.flops)


class Head(base_layer.BaseLayer):
  """relu and global average pooling of the last cell's output: NestedMap(x, prev) -> [batch, channels]."""

  def FProp(self, inputs):
    return tf.reduce_mean(tf.nn.relu(inputs['x']), axis=[1, 2])

  @classmethod
  def FPropMeta(cls, params, shapes):
    x = tf.TensorShape(shapes['x'])
    return base_layer.Meta([x[0], x[3]], 2 * (x.num_elements() or 0))


def AmoebaNetLayers(num_cells, filters, bn_tpl=None):
  """(layer Params list, output feature depth) of AmoebaNet-D(num_cells, filters); see the module docstring.

  bn_tpl (BatchNormLayer Params) configures every batch norm (decay, epsilon, frozen statistics).
  """
  bn_tpl = bn_tpl or batch_norm.BatchNormLayer.Params()
  if num_cells < 3 or num_cells % 3:
    raise errors.ConfigError('AmoebaNet num_cells must be a positive multiple of 3 (L/3 normal cells per '
                             'stack), got %d.' % num_cells)
  if filters % 8:
    raise errors.ConfigError('AmoebaNet filters must be a multiple of 8 (ops use filters/4 channels, reductions '
                             'double them), got %d.' % filters)
  layers = [Stem.Params().Set(channels=filters, bn_tpl=bn_tpl)]
  channels_prev_prev = channels_prev = channels = filters
  reduction_prev = False
  for stack in range(3):
    if stack:
      channels *= 2
      layers.append(AmoebaCell.Params().Set(channels_prev_prev=channels_prev_prev, channels_prev=channels_prev,
                                            channels=channels, reduction=True, reduction_prev=reduction_prev,
                                            bn_tpl=bn_tpl))
      channels_prev_prev, channels_prev, reduction_prev = channels_prev, channels * len(REDUCTION_CONCAT), True
    for _ in range(num_cells // 3):
      layers.append(AmoebaCell.Params().Set(channels_prev_prev=channels_prev_prev, channels_prev=channels_prev,
                                            channels=channels, reduction=False, reduction_prev=reduction_prev,
                                            bn_tpl=bn_tpl))
      channels_prev_prev, channels_prev, reduction_prev = channels_prev, channels * len(NORMAL_CONCAT), False
  layers.append(Head.Params())
  return layers, channels_prev


def ParamCount(num_cells, filters, num_classes):
  """Trainable parameters of AmoebaNet-D(num_cells, filters) with a num_classes softmax, in closed form.

  Convolutions have no bias; each batch norm has a scale and an offset per channel. Independent of the layer
  code, so tests can check the built model against it.
  """
  def Rcb(k, cin, cout):
    return k * cin * cout + 2 * cout

  def Reduce(cin, cout):
    return cin * cout + 2 * cout

  def Op(name, c, stride):
    q = c // 4
    return {'none': Reduce(c, c) if stride == 2 else 0, 'avg_pool_3x3': 0, 'max_pool_3x3': 0, 'max_pool_2x2': 0,
            'conv_1x1': Rcb(1, c, c), 'conv_3x3': Rcb(1, c, q) + Rcb(9, q, q) + Rcb(1, q, c),
            'conv_1x7_7x1': Rcb(1, c, q) + 2 * Rcb(7, q, q) + Rcb(1, q, c)}[name]

  def Cell(c_pp, c_p, c, reduction, reduction_prev):
    operations, concat = AmoebaCell.Genotype(reduction)
    total = Rcb(1, c_p, c)
    if reduction_prev:
      total += Reduce(c_pp, c)
    elif c_pp != c:
      total += Rcb(1, c_pp, c)
    total += sum(Op(name, c, 2 if reduction and index < 2 else 1) for index, name in operations)
    return total, c * len(concat)

  total = 27 * filters + 2 * filters
  c_pp = c_p = c = filters
  reduction_prev = False
  for stack in range(3):
    if stack:
      c *= 2
      params, out = Cell(c_pp, c_p, c, True, reduction_prev)
      total, c_pp, c_p, reduction_prev = total + params, c_p, out, True
    for _ in range(num_cells // 3):
      params, out = Cell(c_pp, c_p, c, False, reduction_prev)
      total, c_pp, c_p, reduction_prev = total + params, c_p, out, False
  return total + c_p * num_classes + num_classes
