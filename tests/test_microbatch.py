"""Micro-batching: split/merge of tensors and NestedMaps, padding, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.gpipe import microbatch


def test_split_and_merge_round_trip_nested_map():
  batch = NestedMap(x=tf.reshape(tf.range(24.0), [6, 4]), ids=tf.range(6), skip=NestedMap(h=tf.ones([6, 2, 3])))
  micro, pad = microbatch.Split(batch, 3)
  assert pad == 0 and len(micro) == 3
  assert micro[1].x.shape == (2, 4) and micro[1].skip.h.shape == (2, 2, 3)
  np.testing.assert_array_equal(micro[2].ids, [4, 5])
  merged = microbatch.Merge(micro)
  for a, b in zip(merged.Flatten(), batch.Flatten()):
    np.testing.assert_array_equal(a, b)


def test_batch_dim():
  x = tf.reshape(tf.range(12.0), [2, 6])
  micro, _ = microbatch.Split(x, 3, batch_dim=1)
  np.testing.assert_array_equal(micro[0], [[0, 1], [6, 7]])
  np.testing.assert_array_equal(microbatch.Merge(micro, batch_dim=1), x)


def test_pad_policy():
  x = tf.reshape(tf.range(10.0), [5, 2])
  micro, pad = microbatch.Split(x, 4, pad=True)
  assert pad == 3 and [m.shape[0] for m in micro] == [2, 2, 2, 2]
  np.testing.assert_array_equal(micro[3], np.zeros([2, 2]))
  np.testing.assert_array_equal(microbatch.Merge(micro, pad_rows=pad), x)
  np.testing.assert_array_equal(microbatch.PadMask(5, 4), [1, 1, 1, 1, 1, 0, 0, 0])


@pytest.mark.parametrize('batch_dim,pad', [(0, False), (0, True), (1, False), (1, True)])
def test_stacked_holds_the_micro_batches_of_split_and_merge_stacked_inverts_it(batch_dim, pad):
  x = tf.reshape(tf.range(30.0), [5, 6]) if batch_dim == 0 else tf.reshape(tf.range(30.0), [6, 5])
  m = 4 if pad else 5
  micro, pad_rows = microbatch.Split(x, m, batch_dim=batch_dim, pad=pad)
  stacked = microbatch.Stacked(x, m, batch_dim, pad_rows)
  assert stacked.shape[0] == m
  for i in range(m):
    np.testing.assert_array_equal(stacked[i], micro[i])
  np.testing.assert_array_equal(microbatch.MergeStacked(stacked, batch_dim, pad_rows), x)


def test_errors():
  x = tf.zeros([6, 2])
  with pytest.raises(errors.ConfigError) as e:
    microbatch.Split(x, 4)
  assert str(e.value) == ('Batch size 6 is not divisible by num_micro_batches 4. Use a batch size that is a '
                          "multiple of 4 (e.g. 8) or another micro-batch count; a PipeliningLayer with "
                          "schedule='gpipe' also takes pad=True (zero rows, dropped from its outputs).")
  with pytest.raises(errors.ConfigError, match='num_micro_batches 8 is larger than the batch size 6'):
    microbatch.Split(x, 8)
  with pytest.raises(errors.ShapeError, match='Fields disagree on the batch size along dim 0: a=6, b=5'):
    microbatch.Split(NestedMap(a=x, b=tf.zeros([5])), 2)
  with pytest.raises(errors.ShapeError, match='field s has shape \\(\\), which has no such dimension'):
    microbatch.Split(NestedMap(s=tf.constant(1.0)), 1)
