"""BatchFunction: one relaxed trace per batch size, with the batch dimension kept static."""

import logging

import tensorflow as tf

from lingpipe.core.nested_map import NestedMap
from lingpipe.runners import batch_function


def _Batch(batch_size, src_len, tgt_len):
  return NestedMap(src=tf.ones([batch_size, src_len]), tgt=tf.ones([batch_size, tgt_len], tf.int32))


def test_new_lengths_do_not_retrace_and_the_batch_size_stays_static():
  seen = []

  def Step(batch):
    seen.append((batch.src.shape[0], batch.tgt.shape[0], batch.src.shape[1], batch.tgt.shape[1]))
    return tf.reduce_sum(batch.src) + tf.cast(tf.reduce_sum(batch.tgt), tf.float32)

  fn = batch_function.BatchFunction(Step)
  lengths = [(8, 16), (16, 8), (24, 32), (8, 8), (48, 64), (32, 24)]
  for src_len, tgt_len in lengths:
    assert float(fn(_Batch(4, src_len, tgt_len))) == 4 * (src_len + tgt_len)
  assert fn.TracingCount() == 2  # The first lengths, then unknown lengths for all the others.
  assert seen[-1] == (4, 4, None, None)
  fn(_Batch(3, 8, 16))  # A last, smaller batch: its own trace, its size static for micro-batching.
  assert fn.TracingCount() == 3 and seen[-1] == (3, 3, 8, 16)
  fn(_Batch(4, 16, 16))
  assert fn.TracingCount() == 3


def test_many_batch_sizes_give_no_retracing_warning():
  """Decoding bucketed data sees a batch size per bucket's last batch: one trace each, which is no retracing."""
  logged = []
  handler = logging.Handler()
  handler.emit = lambda record: logged.append(record.getMessage())
  tf.get_logger().addHandler(handler)
  try:
    fn = batch_function.BatchFunction(lambda batch: tf.reduce_sum(batch.src))
    for batch_size in range(1, 9):
      fn(_Batch(batch_size, 8, 8))
  finally:
    tf.get_logger().removeHandler(handler)
  assert fn.TracingCount() == 8
  assert not [m for m in logged if 'retracing' in m], logged


def test_dimensions_the_dataset_leaves_unknown_are_relaxed_from_the_first_trace():
  """A bucketed dataset's spec leaves the lengths unknown: one trace for every length (the first of two traces
  without the spec stayed in memory), the batch dimension static, and a batch the spec does not describe traced
  as without it."""
  seen = []

  def Step(batch):
    seen.append((batch.src.shape[0], batch.src.shape[1], batch.tgt.shape[1]))
    return tf.reduce_sum(batch.src) + tf.cast(tf.reduce_sum(batch.tgt), tf.float32)

  spec = NestedMap(src=tf.TensorSpec([None, None], tf.float32), tgt=tf.TensorSpec([None, None], tf.int32))
  fn = batch_function.BatchFunction(Step, spec)
  for src_len, tgt_len in [(8, 16), (16, 8), (24, 32)]:
    assert float(fn(_Batch(4, src_len, tgt_len))) == 4 * (src_len + tgt_len)
  assert fn.TracingCount() == 1 and seen == [(4, None, None)]
  fn(_Batch(3, 8, 16))
  assert fn.TracingCount() == 2 and seen[-1] == (3, None, None)
  other = batch_function.BatchFunction(Step, NestedMap(src=tf.TensorSpec([None, 5], tf.float32)))
  other(_Batch(4, 8, 16))
  other(_Batch(4, 16, 8))
  assert other.TracingCount() == 2  # Not described by the spec: the first lengths, then relaxed ones.
