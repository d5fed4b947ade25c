"""NestedMap: attribute access, key validation, Flatten/Pack/Transform, FilterKeyVal, DebugString."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap


def _Sample():
  return NestedMap(b=NestedMap(y=2, x=1), a=[3, NestedMap(z=4)], c=5)


def test_attribute_access():
  m = NestedMap(a=1)
  m.b = 2
  assert m.a == 1 and m['b'] == 2
  del m.a
  assert 'a' not in m
  with pytest.raises(AttributeError, match="NestedMap has no field 'bb'; it has: b. Did you mean: b?"):
    _ = m.bb


def test_key_validation():
  for bad in ('1a', 'a-b', 'a.b', 3):
    with pytest.raises(errors.ConfigError, match='invalid'):
      NestedMap({bad: 1})
  for reserved in ('keys', 'items', 'Flatten'):
    with pytest.raises(errors.ConfigError, match='reserved'):
      m = NestedMap()
      m[reserved] = 1


def test_flatten_pack_transform():
  m = _Sample()
  assert m.Flatten() == [3, 4, 1, 2, 5]
  assert m.Keys() == ['a[0]', 'a[1].z', 'b.x', 'b.y', 'c']
  packed = m.Pack([10, 20, 30, 40, 50])
  assert packed.a[1].z == 20 and packed.b.y == 40 and isinstance(packed.b, NestedMap)
  assert m.Transform(lambda v: v * 2).Flatten() == [6, 8, 2, 4, 10]
  with pytest.raises(errors.ConfigError, match='got 2 leaves; this structure has 5'):
    m.Pack([1, 2])
  assert m.IsCompatible(packed) and not m.IsCompatible(NestedMap(c=1))


def test_works_with_tf_nest_and_tf_function():
  m = NestedMap(x=tf.constant([1.0, 2.0]), y=NestedMap(z=tf.constant(3.0)))
  assert [t.numpy().tolist() for t in tf.nest.flatten(m)] == [[1.0, 2.0], 3.0]

  @tf.function
  def Double(inputs):
    return inputs.Transform(lambda t: t * 2)

  out = Double(m)
  assert isinstance(out, NestedMap) and out.y.z.numpy() == 6.0


def test_filter_key_val():
  m = _Sample()
  kept = m.FilterKeyVal(lambda path, v: v % 2 == 0)
  assert kept == NestedMap(a=[NestedMap(z=4)], b=NestedMap(y=2))
  assert m.FilterKeyVal(lambda path, v: path.startswith('b.')) == NestedMap(b=NestedMap(x=1, y=2))
  assert m.FilterKeyVal(lambda path, v: False) == NestedMap()


def test_debug_string_and_copy():
  m = NestedMap(x=np.zeros([2, 3], np.float32), n=3)
  text = m.DebugString()
  assert 'x' in text and 'float32 [2, 3]' in text and 'n' in text
  c = _Sample().copy()
  c.b.x = 100
  assert _Sample().b.x == 1
