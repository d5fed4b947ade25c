"""AmoebaNet genotypes as published, and the reference network's parameter count in closed form.

The genotypes are those of Real et al. 2019 in the notation of TensorFlow's reference implementation
(tensorflow/tpu, models/official/amoeba_net/model_specs.py): for each of the cell's five new states, two
(operation, input state) pairs whose results are added; state 0 is the cell's input after a 1x1 convolution,
state 1 the input before it. The unused states are concatenated into the cell's output.

`ParamCount` follows the reference's network (network_utils.py, model_builder.py) as written there, not lingpipe's
layers, so tests can hold the layers to it and to the GPipe paper's figures.
"""

import collections

CellSpec = collections.namedtuple('CellSpec', 'operations inputs concat')

OPERATIONS = ('none', '1x1', '3x3', '1x7_7x1', 'avg_pool_3x3', 'max_pool_3x3', 'max_pool_2x2', 'separable_3x3_2',
              'dil_2_separable_5x5_2')


def _Spec(operations, inputs, used):
  return CellSpec(tuple(operations), tuple(inputs), tuple(i for i, u in enumerate(used) if not u))


GENOTYPES = {
    'B': (_Spec(['1x1', 'max_pool_3x3', 'none', 'separable_3x3_2', '1x1', 'separable_3x3_2', '1x1', 'none',
                 'avg_pool_3x3', '1x1'], [1, 1, 1, 0, 1, 0, 2, 2, 1, 5], [0, 1, 1, 0, 0, 1, 0]),
          _Spec(['max_pool_2x2', 'max_pool_3x3', 'none', '3x3', 'dil_2_separable_5x5_2', 'max_pool_3x3', 'none',
                 'separable_3x3_2', 'avg_pool_3x3', '1x1'], [0, 0, 2, 1, 2, 2, 3, 1, 4, 3],
                [1, 1, 1, 1, 1, 0, 0])),
    'D': (_Spec(['1x1', 'max_pool_3x3', 'none', '1x7_7x1', '1x1', '1x7_7x1', 'max_pool_3x3', 'none',
                 'avg_pool_3x3', '1x1'], [1, 1, 1, 0, 0, 0, 2, 2, 1, 5], [0, 1, 1, 0, 0, 1, 0]),
          _Spec(['max_pool_2x2', 'max_pool_3x3', 'none', '3x3', '1x7_7x1', 'max_pool_3x3', 'none', 'max_pool_2x2',
                 'avg_pool_3x3', '1x1'], [0, 0, 2, 1, 2, 2, 3, 1, 2, 3], [1, 1, 1, 1, 0, 0, 0])),
}
STEMS = ('imagenet', 'cifar')
IMAGENET_STEM_FILTERS = 32  # The reference's stem_reduction_size.
CIFAR_STEM_MULTIPLIER = 3.0  # The reference's (NASNet's) stem_multiplier for CIFAR.
AUX_SCALING = 0.4  # The auxiliary head's widths: 128 and 768 times this.


def Cell(genotype, reduction):
  """The CellSpec of `genotype`'s normal or reduction cell."""
  normal, reduce = GENOTYPES[genotype]
  return reduce if reduction else normal


def SeparableInfo(operation):
  """(layers, kernel size) of a 'separable_KxK_N' operation, parsed as the reference does: the 'dil_2_' prefix
  names a dilation its parser does not apply."""
  return int(operation.split('_')[-1]), int(operation.split('x')[0][-1])


def ReductionIndices(num_cells):
  """The normal cells before which a reduction cell goes (the reference's calc_reduction_layers, 2 reductions)."""
  return [int(num_cells * k / 3.0) for k in (1, 2)]


def ImagenetSizes(image_size):
  """Spatial sizes: after the stem convolution (3x3, stride 2, VALID), and after each of the two stem cells."""
  first = (image_size - 3) // 2 + 1
  return first, -(-first // 2), -(-first // 4)


def AuxKernel(size):
  """The auxiliary head's last convolution kernel: the size after a 5x5, stride 3 VALID average pool."""
  return (size - 5) // 3 + 1


def ParamCount(genotype, num_cells, filters, num_classes, stem='imagenet', image_size=224, aux_head=True):
  """Trainable parameters of the reference's AmoebaNet(num_cells, filters) with `genotype`, `stem`, an auxiliary
  head (as trained) and a `num_classes` softmax. Convolutions have no bias; batch norm has a scale and an offset."""

  def Bn(c):
    return 2 * c

  def Op(name, cin, f, stride):
    if 'separable' in name:
      layers, k = SeparableInfo(name)
      return k * k * cin + cin * f + Bn(f) + (layers - 1) * (k * k * f + f * f + Bn(f))
    if name in ('3x3', '1x7_7x1'):
      q = f // 4
      middle = 9 * q * q if name == '3x3' else 7 * q * q + Bn(q) + 7 * q * q
      return cin * q + Bn(q) + middle + Bn(q) + q * f + Bn(f)
    if name in ('none', '1x1'):
      return cin * f + Bn(f) if stride > 1 or name == '1x1' or cin != f else 0
    return cin * f + Bn(f) if cin != f else 0  # A pooling.

  def CellCount(reduction, f, c_x, c_prev, prev_larger, first):
    spec = Cell(genotype, reduction)
    total = c_x * f + Bn(f)
    channels = [f, c_prev if first else f]
    if not first and (prev_larger or c_prev != f):
      total += c_prev * f + Bn(f)  # Factorized reduction (two halves) or a 1x1 convolution: the same count.
    for i, (name, state) in enumerate(zip(spec.operations, spec.inputs)):
      total += Op(name, channels[state], f, 2 if reduction and state < 2 else 1)
      if i % 2:
        channels.append(f)
    return total, len(spec.concat) * f

  if stem == 'imagenet':
    total = 9 * 3 * IMAGENET_STEM_FILTERS + Bn(IMAGENET_STEM_FILTERS)
    c0, out0 = CellCount(True, filters // 4, IMAGENET_STEM_FILTERS, IMAGENET_STEM_FILTERS, False, True)
    c1, out1 = CellCount(True, filters // 2, out0, IMAGENET_STEM_FILTERS, True, False)
    total += c0 + c1
    c_prev, c_x, prev_larger, first = out0, out1, True, False
    size = ImagenetSizes(image_size)[2]
  else:
    stem_filters = int(filters * CIFAR_STEM_MULTIPLIER)
    total = 9 * 3 * stem_filters + Bn(stem_filters)
    c_prev = c_x = stem_filters
    prev_larger, first, size = False, True, image_size
  f = filters
  reductions = ReductionIndices(num_cells)
  for n in range(num_cells):
    if n in reductions:
      f *= 2
      count, out = CellCount(True, f, c_x, c_prev, prev_larger, first)
      total, c_prev, c_x, prev_larger, first, size = total + count, c_x, out, True, False, -(-size // 2)
    count, out = CellCount(False, f, c_x, c_prev, prev_larger, first)
    total, c_prev, c_x, prev_larger, first = total + count, c_x, out, False, False
    if aux_head and n == reductions[1] - 1:
      a1, a2 = int(128 * AUX_SCALING), int(768 * AUX_SCALING)
      k = AuxKernel(size)
      total += c_x * a1 + Bn(a1) + k * k * a1 * a2 + Bn(a2) + a2 * num_classes + num_classes
  return total + c_x * num_classes + num_classes
