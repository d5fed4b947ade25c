"""Helpers shared by the layer tests."""

import numpy as np
import tensorflow as tf


def Build(layer_cls, **kwargs):
  return layer_cls.Params().Set(name='layer', **kwargs).Instantiate()


def Random(shape, seed=0, dtype=np.float32):
  return np.random.RandomState(seed).normal(size=shape).astype(dtype)


def CheckMeta(layer, *inputs):
  """Asserts FPropMeta's output shape equals FProp's and returns the meta."""
  out = layer.FProp(*[tf.constant(x) for x in inputs])
  meta = type(layer).FPropMeta(layer.params, *[np.shape(x) for x in inputs])
  assert meta.out_shapes[0].as_list() == list(out.shape), (meta.out_shapes, out.shape)
  assert meta.flops > 0
  return meta
