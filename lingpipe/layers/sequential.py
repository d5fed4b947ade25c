"""SequentialLayer: children applied one after another."""

from lingpipe.core import base_layer
from lingpipe.core import errors


class SequentialLayer(base_layer.BaseLayer):
  """Applies `sub` layers in order: y = sub[n-1](...sub[0](x))."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('sub', [], 'List of layer Params, applied in order.')
    return p

  def __init__(self, params):
    super().__init__(params)
    if not self.params.sub:
      raise errors.ConfigError('SequentialLayer %s: sub is empty; give it at least one layer.' % self.path)
    self.CreateChildren('sub', self.params.sub)

  def FProp(self, inputs):
    for layer in self.sub:
      inputs = layer.FProp(inputs)
    return inputs

  @classmethod
  def FPropMeta(cls, params, *input_shapes):
    flops = 0
    shapes = input_shapes
    for sub in params.sub:
      meta = sub.cls.FPropMeta(sub, *shapes)
      flops += meta.flops
      shapes = meta.out_shapes
    return base_layer.Meta(shapes, flops)
