"""AmoebaNet-B and -D (Real et al. 2019) as a flat sequence of layers, built as TensorFlow's reference does.

Every cell reads the two previous cells' outputs, so the state between layers is NestedMap(x=latest, prev=the one
before), and a PipeliningLayer can cut the sequence anywhere: both fields travel between pipeline cells (and the
auxiliary head's logits, once computed, travel with them to the end).

AmoebaNet(L, F) has L normal cells, L/3 per stack, two reduction cells between the stacks, and F filters in the
first stack (doubled by each reduction). The ImageNet stem is a stride-2 3x3 convolution to 32 filters and two
reduction cells at F/4 and F/2 filters; the CIFAR stem one 3x3 convolution to 3F. The genotypes and the
reference's parameter count are in amoebanet_specs.py, the operations and drop-path in amoebanet_ops.py.
"""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import batch_norm
from lingpipe.layers import conv
from lingpipe.layers import dropout
from lingpipe.layers import linear
from lingpipe.tasks.image import amoebanet_ops as ops
from lingpipe.tasks.image import amoebanet_specs as specs
from lingpipe.tasks.image.conv_bn import ConvBn


def _Passed(inputs, **fields):
  """`inputs` (a NestedMap of x, prev and what travels with them) with `fields` replaced."""
  out = NestedMap(inputs)
  out.update(fields)
  return out


class AmoebaCell(base_layer.BaseLayer):
  """One normal or reduction cell: NestedMap(x, prev, ...) -> NestedMap(x=concat of the unused states, prev=x,
  ...)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('genotype', 'D', 'The genotype: one of %s (amoebanet_specs.GENOTYPES).' % ', '.join(specs.GENOTYPES))
    p.Define('channels_prev_prev', 0, 'Channels of inputs.prev.')
    p.Define('channels_prev', 0, 'Channels of inputs.x.')
    p.Define('channels', 0, 'Channels of every operation (the cell outputs channels * len(concat)).')
    p.Define('reduction', False, 'A reduction cell: ops on the inputs have stride 2.')
    p.Define('reduction_prev', False, 'inputs.prev is twice as large as inputs.x (a factorized reduction).')
    p.Define('first', False, 'The first cell after a stem convolution: the reference gives it no previous layer, '
             'so inputs.prev (the stem\'s output, as inputs.x) is used as it is.')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Template of every batch norm in the cell.')
    p.Define('drop_path_tpl', None, 'amoebanet_ops.DropPath Params ending every operation but the identity, or None.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.genotype not in specs.GENOTYPES:
      raise errors.ConfigError('Layer %s: unknown AmoebaNet genotype %r; expected one of %s.%s' % (
          self.path, p.genotype, ', '.join(specs.GENOTYPES), errors.DidYouMean(str(p.genotype), specs.GENOTYPES)))
    c = p.channels
    self.CreateChild('reduce1', ops.ReluConvBn((1, 1, p.channels_prev, c), bn_tpl=p.bn_tpl))
    if not p.first and p.reduction_prev:
      self.CreateChild('reduce2', ops.FactorizedReduce.Params().Set(input_dim=p.channels_prev_prev, output_dim=c,
                                                                    bn_tpl=p.bn_tpl))
    elif not p.first and p.channels_prev_prev != c:
      self.CreateChild('reduce2', ops.ReluConvBn((1, 1, p.channels_prev_prev, c), bn_tpl=p.bn_tpl))
    spec = specs.Cell(p.genotype, p.reduction)
    channels = self._StateChannels(p)
    if [s for s in spec.concat if s < 2 and (p.reduction or channels[s] != c)]:
      raise errors.ConfigError('Layer %s: genotype %s concatenates an input state that would need reducing first; '
                               'only the B and D genotypes are built.' % (self.path, p.genotype))
    identity = []
    for i, (name, state) in enumerate(zip(spec.operations, spec.inputs)):
      op = ops.OperationParams(name, channels[state], c, 2 if p.reduction and state < 2 else 1, p.bn_tpl,
                               p.drop_path_tpl)
      identity.append(op is None)
      if op is not None:
        self.CreateChild('op%d' % i, op)
    object.__setattr__(self, '_identity', identity)  # Plain state, not tracked by tf.Module.

  @staticmethod
  def _StateChannels(params):
    """Channels of each state: the input after reduce1, the previous input (as it is for the first cell), the new
    states."""
    c = params.channels
    spec = specs.Cell(params.genotype, params.reduction)
    return [c, params.channels_prev_prev if params.first else c] + [c] * (len(spec.operations) // 2)

  def FProp(self, inputs):
    p = self.params
    if not isinstance(inputs, dict) or 'x' not in inputs or 'prev' not in inputs:
      raise errors.ShapeError('Layer %s (AmoebaCell): inputs must be NestedMap(x, prev), got %s.' % (
          self.path, type(inputs).__name__))
    self.CheckInputShape(inputs['x'], rank=4, last_dim=p.channels_prev, arg='inputs.x')
    self.CheckInputShape(inputs['prev'], rank=4, last_dim=p.channels_prev_prev, arg='inputs.prev')
    states = [self.reduce1.FProp(inputs['x']),
              self.reduce2.FProp(inputs['prev']) if 'reduce2' in self.children else inputs['prev']]
    spec = specs.Cell(p.genotype, p.reduction)
    for i in range(0, len(spec.operations), 2):
      pair = []
      for j in (i, i + 1):
        h = states[spec.inputs[j]]
        pair.append(h if self._identity[j] else getattr(self, 'op%d' % j).FProp(h))
      states.append(pair[0] + pair[1])
    return _Passed(inputs, x=tf.concat([states[i] for i in spec.concat], axis=-1), prev=inputs['x'])

  @classmethod
  def FPropMeta(cls, params, shapes):
    x = tf.TensorShape(shapes['x'])
    n, h, w, _ = x.as_list()
    c = params.channels
    spec = specs.Cell(params.genotype, params.reduction)
    flops = 2 * (n or 0) * (h or 0) * (w or 0) * (params.channels_prev + params.channels_prev_prev) * c
    channels = cls._StateChannels(params)
    for name, state in zip(spec.operations, spec.inputs):
      op = ops.OperationParams(name, channels[state], c, 2 if params.reduction and state < 2 else 1)
      if op is not None:
        flops += op.cls.FPropMeta(op, tf.TensorShape([n, h, w, channels[state]])).flops
    scale = 2 if params.reduction else 1
    out = [n, -(-h // scale) if h else None, -(-w // scale) if w else None, c * len(spec.concat)]
    return base_layer.Meta(_Passed(NestedMap(shapes), x=tf.TensorShape(out), prev=x), flops)


class Stem(base_layer.BaseLayer):
  """A 3x3 convolution and batch norm: NestedMap(x=s, prev=s) for the first cell. The reference's ImageNet stem
  convolution has stride 2 and VALID padding; its CIFAR stem's, stride 1 and SAME."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('channels', 0, 'Output channels.')
    p.Define('imagenet', False, 'Stride 2, VALID padding (ImageNet), else stride 1, SAME (CIFAR).')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Batch norm template (dim is set here).')
    return p

  @classmethod
  def _Conv(cls, params):
    stride = 2 if params.imagenet else 1
    return conv.Conv2DLayer.Params().Set(filter_shape=(3, 3, 3, params.channels), filter_stride=(stride, stride),
                                         padding='VALID' if params.imagenet else 'SAME')

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('conv', self._Conv(self.params))
    self.CreateChild('bn', self.params.bn_tpl.Copy().Set(dim=self.params.channels))

  def FProp(self, images):
    s = self.bn.FProp(self.conv.FProp(images))
    return NestedMap(x=s, prev=s)

  @classmethod
  def FPropMeta(cls, params, input_shape):
    meta = conv.Conv2DLayer.FPropMeta(cls._Conv(params), input_shape)
    return base_layer.Meta(NestedMap(x=meta.out_shapes[0], prev=meta.out_shapes[0]), meta.flops)


class AuxHead(base_layer.BaseLayer):
  """The auxiliary classifier on relu(inputs.x): 5x5 average pool (stride 3), 1x1 convolution, a convolution over
  what is left of the image, a linear layer; adds aux_logits to what travels between layers."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('input_dim', 0, 'Channels of inputs.x.')
    p.Define('input_size', 0, 'Height and width of inputs.x.')
    p.Define('num_classes', 0, 'Classes of the logits.')
    p.Define('bn_tpl', batch_norm.BatchNormLayer.Params(), 'Batch norm template (dim is set here).')
    return p

  @classmethod
  def _Sizes(cls, params):
    return int(128 * specs.AUX_SCALING), int(768 * specs.AUX_SCALING), specs.AuxKernel(params.input_size)

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    narrow, wide, k = self._Sizes(p)
    if k < 1:
      raise errors.ConfigError('Layer %s: the auxiliary head needs a feature map of at least 5x5, and the image '
                               'size leaves %dx%d here. Use larger images or no auxiliary head.' % (
                                   self.path, p.input_size, p.input_size))
    self.CreateChild('proj', ConvBn.Params().Set(filter_shape=(1, 1, p.input_dim, narrow), relu='after',
                                                 bn_tpl=p.bn_tpl))
    self.CreateChild('conv', ConvBn.Params().Set(filter_shape=(k, k, narrow, wide), relu='after', padding='VALID',
                                                 bn_tpl=p.bn_tpl))
    self.CreateChild('logits', linear.ProjectionLayer.Params().Set(input_dim=wide, output_dim=p.num_classes))

  def FProp(self, inputs):
    x = tf.nn.avg_pool2d(tf.nn.relu(inputs['x']), 5, 3, 'VALID')
    x = self.conv.FProp(self.proj.FProp(x))
    return _Passed(inputs, aux_logits=self.logits.FProp(tf.reshape(x, [-1, x.shape[-1]])))

  @classmethod
  def FPropMeta(cls, params, shapes):
    n = tf.TensorShape(shapes['x'])[0]
    narrow, wide, k = cls._Sizes(params)
    flops = 2 * (n or 0) * (k * k * params.input_dim * narrow + k * k * narrow * wide + wide * params.num_classes)
    return base_layer.Meta(_Passed(NestedMap(shapes), aux_logits=tf.TensorShape([n, params.num_classes])), flops)


class Head(base_layer.BaseLayer):
  """relu, global average pooling and dropout of the last cell's output: NestedMap(x, prev) -> [batch, channels],
  or NestedMap(features, aux_logits) where an auxiliary head ran."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('keep_prob', 1.0, 'Dropout keep probability of the pooled features (the reference trains with 0.5).')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateChild('dropout', dropout.DropoutLayer.Params().Set(keep_prob=self.params.keep_prob,
                                                                  deterministic=True))

  def FProp(self, inputs):
    features = self.dropout.FProp(tf.reduce_mean(tf.nn.relu(inputs['x']), axis=[1, 2]))
    if 'aux_logits' in inputs:
      return NestedMap(features=features, aux_logits=inputs['aux_logits'])
    return features

  @classmethod
  def FPropMeta(cls, params, shapes):
    x = tf.TensorShape(shapes['x'])
    features = tf.TensorShape([x[0], x[3]])
    out = NestedMap(features=features, aux_logits=shapes['aux_logits']) if 'aux_logits' in shapes else features
    return base_layer.Meta(out, 2 * (x.num_elements() or 0))


def AmoebaNetLayers(num_cells, filters, bn_tpl=None, genotype='D', stem='cifar', image_size=32, num_classes=0,
                    drop_path_keep_prob=1.0, drop_path_burn_in_steps=0, dense_dropout_keep_prob=1.0):
  """(layer Params list, output feature depth) of AmoebaNet(num_cells, filters) with `genotype` and `stem` (one of
  amoebanet_specs.STEMS) for `image_size` images; see the module docstring.

  num_classes: > 0 adds the reference's auxiliary head (after the last normal cell of the second stack) with
    that many classes; its logits come out beside the features.
  bn_tpl (BatchNormLayer Params) configures every batch norm (decay, epsilon, frozen statistics).
  """
  bn_tpl = bn_tpl or batch_norm.BatchNormLayer.Params()
  if num_cells < 3 or num_cells % 3:
    raise errors.ConfigError('AmoebaNet num_cells must be a positive multiple of 3 (L/3 normal cells per '
                             'stack), got %d.' % num_cells)
  if filters % 8:
    raise errors.ConfigError('AmoebaNet filters must be a multiple of 8 (ops use filters/4 channels, reductions '
                             'double them), got %d.' % filters)
  if stem not in specs.STEMS:
    raise errors.ConfigError('AmoebaNet stem must be one of %s, got %r.%s' % (
        ', '.join(specs.STEMS), stem, errors.DidYouMean(str(stem), specs.STEMS)))
  drop_path = ops.DropPath.Params().Set(keep_prob=drop_path_keep_prob, burn_in_steps=drop_path_burn_in_steps)

  def Cell(reduction, c_pp, c_p, c, reduction_prev, first):
    return AmoebaCell.Params().Set(genotype=genotype, channels_prev_prev=c_pp, channels_prev=c_p, channels=c,
                                   reduction=reduction, reduction_prev=reduction_prev, first=first, bn_tpl=bn_tpl,
                                   drop_path_tpl=drop_path)

  if genotype not in specs.GENOTYPES:
    raise errors.ConfigError('Unknown AmoebaNet genotype %r; expected one of %s.%s' % (
        genotype, ', '.join(specs.GENOTYPES), errors.DidYouMean(str(genotype), specs.GENOTYPES)))
  normal_out, reduction_out = (len(spec.concat) for spec in specs.GENOTYPES[genotype])
  if stem == 'imagenet':
    stem_filters = specs.IMAGENET_STEM_FILTERS
    layers = [Stem.Params().Set(channels=stem_filters, imagenet=True, bn_tpl=bn_tpl),
              Cell(True, stem_filters, stem_filters, filters // 4, False, True),
              Cell(True, stem_filters, reduction_out * (filters // 4), filters // 2, True, False)]
    c_pp, c_p, reduction_prev, first = reduction_out * (filters // 4), reduction_out * (filters // 2), True, False
    size = specs.ImagenetSizes(image_size)[2]
  else:
    stem_filters = int(filters * specs.CIFAR_STEM_MULTIPLIER)
    layers = [Stem.Params().Set(channels=stem_filters, bn_tpl=bn_tpl)]
    c_pp = c_p = stem_filters
    reduction_prev, first, size = False, True, image_size
  c = filters
  reductions = specs.ReductionIndices(num_cells)
  for n in range(num_cells):
    if n in reductions:
      c *= 2
      layers.append(Cell(True, c_pp, c_p, c, reduction_prev, first))
      c_pp, c_p, reduction_prev, first, size = c_p, c * reduction_out, True, False, -(-size // 2)
    layers.append(Cell(False, c_pp, c_p, c, reduction_prev, first))
    c_pp, c_p, reduction_prev, first = c_p, c * normal_out, False, False
    if num_classes > 0 and n == reductions[1] - 1:
      layers.append(AuxHead.Params().Set(input_dim=c_p, input_size=size, num_classes=num_classes, bn_tpl=bn_tpl))
  layers.append(Head.Params().Set(keep_prob=dense_dropout_keep_prob))
  return layers, c_p
