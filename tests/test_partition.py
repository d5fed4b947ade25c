"""Partitioning layers into cells: explicit, uniform, by params, flops, time and memory; errors."""

import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.gpipe.planner import partition
from lingpipe.layers import linear


def _Layers(dims):
  return [linear.ProjectionLayer.Params().Set(input_dim=a, output_dim=b) for a, b in zip(dims[:-1], dims[1:])]


def test_balance_by_cost_minimizes_the_largest_cell():
  assert partition.BalanceByCost([1] * 8, 4) == [2, 2, 2, 2]
  assert partition.BalanceByCost([1, 1, 1, 10, 1, 1], 3) == [3, 1, 2]
  assert partition.BalanceByCost([5, 1, 1, 1, 1, 1], 2) == [1, 5]
  assert sorted(partition.BalanceByCost([1] * 7, 3)) == [2, 2, 3]


def test_methods():
  layers = _Layers([4, 64, 4, 4, 4])  # Two big layers first, then two small ones.
  assert partition.Partition(layers, 2, 'uniform') == [2, 2]
  assert partition.Partition(layers, 2, [1, 3]) == [1, 3]
  assert partition.ParamCounts(layers) == [4 * 64 + 64, 64 * 4 + 4, 20, 20]
  assert partition.Partition(layers, 2, 'params') == [1, 3]
  assert partition.FlopCounts(layers, tf.TensorShape([8, 4])) == [2 * 8 * 4 * 64, 2 * 8 * 64 * 4, 256, 256]
  assert partition.Partition(layers, 2, 'flops', input_shapes=tf.TensorShape([8, 4])) == [1, 3]
  sample = tf.random.normal([64, 4])
  for method in ('time', 'memory'):
    counts = partition.Partition(layers, 2, method, sample_inputs=sample)
    assert sum(counts) == 4 and min(counts) >= 1


def test_errors():
  layers = _Layers([4, 4, 4])
  with pytest.raises(errors.ConfigError) as e:
    partition.Partition(layers, 3)
  assert str(e.value) == 'num_splits 3 is larger than the number of layers 2; use at most 2 splits.'
  with pytest.raises(errors.ConfigError, match=r'balance \[1, 2\] sums to 3 but there are 2 layers'):
    partition.Partition(layers, 2, [1, 2])
  with pytest.raises(errors.ConfigError, match='has an empty cell'):
    partition.Partition(layers, 2, [0, 2])
  with pytest.raises(errors.ConfigError, match='has 1 cells but num_splits is 2'):
    partition.Partition(layers, 2, [2])
  with pytest.raises(errors.ConfigError, match="Unknown balance method 'flop'.*Did you mean: flops"):
    partition.Partition(layers, 2, 'flop')
  with pytest.raises(errors.ConfigError, match='needs the input shapes'):
    partition.Partition(layers, 2, 'flops')
