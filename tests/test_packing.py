"""Parameter packing of a pipeline cell, and reading a layer's variables as given tensors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.gpipe import packing
from lingpipe.layers import linear


def _Variables():
  rng = np.random.RandomState(0)
  return [tf.Variable(rng.normal(size=(3, 5)).astype(np.float32)),  # 15 values: padded to a 64-byte row.
          tf.Variable(rng.normal(size=(32,)).astype(np.float32)),
          tf.Variable(rng.normal(size=(2, 3)).astype(np.float64)),
          tf.Variable(rng.normal(size=(4,)).astype(np.float32), trainable=False),
          tf.Variable([1, 2], dtype=tf.int32)]


def test_unpack_of_pack_gives_back_every_trainable_float_variable_once():
  variables = _Variables()
  pack = packing.Packing(variables + variables[:1])  # A variable listed twice is packed once.
  assert pack.variables == variables[:3]
  packed = pack.Pack()
  assert [(t.dtype, t.shape.as_list()) for t in packed] == [(tf.float32, [3, 16]), (tf.float64, [1, 8])]
  for var, value in zip(pack.variables, pack.Unpack(packed)):
    np.testing.assert_array_equal(value, var.numpy())
  assert [t.shape.as_list() for t in pack.Zeros()] == [[3, 16], [1, 8]]


def test_gradient_through_unpack_is_the_packed_layout_of_the_variables_gradients():
  variables = _Variables()[:3]
  pack = packing.Packing(variables)
  packed = pack.Pack()
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(packed)
    values = pack.Unpack(packed)
    loss = sum(tf.reduce_sum(tf.cast(tf.square(v), tf.float64)) for v in values)
  by_packed = pack.Unpack(tape.gradient(loss, packed))
  with tf.GradientTape() as tape:
    loss = sum(tf.reduce_sum(tf.cast(tf.square(v), tf.float64)) for v in variables)
  for got, want in zip(by_packed, tape.gradient(loss, variables)):
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_variables_as_reads_given_tensors_and_restores_the_variables():
  layer = linear.ProjectionLayer.Params().Set(name='proj', input_dim=2, output_dim=2).Instantiate()
  x = tf.ones([1, 2])
  before = layer.FProp(x).numpy()
  values = {v.ref(): tf.zeros_like(v) for v in layer.trainable_variables}
  with base_layer.VariablesAs([layer], values):
    np.testing.assert_array_equal(layer.FProp(x), np.zeros([1, 2]))
  np.testing.assert_array_equal(layer.FProp(x), before)
  with pytest.raises(RuntimeError):
    with base_layer.VariablesAs([layer], values):
      raise RuntimeError('boom')
  assert all(isinstance(v, tf.Variable) for v in layer.vars.values())
  np.testing.assert_array_equal(layer.FProp(x), before)
