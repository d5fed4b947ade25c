"""A tf.function over batches that traces once per batch size, not once per sequence length.

Length-bucketed inputs (translation) give every batch the same size but one of many padded lengths. A plain
tf.function traces the step again for each new (source, target) length pair, and a trace of a pipelined
Transformer costs many steps. `reduce_retracing` lets TensorFlow trace once more with the varying dimensions
unknown, and reuse that trace for every later length.

It would also relax the batch dimension when it varies (a last, smaller batch), but micro-batching needs it static
(microbatch.Split). So batches are first told apart by their leaves' leading dimension, and each batch size gets
its own relaxed function; the leading dimension is taken to be the batch, as lingpipe's input generators make it.
"""

import functools

import tensorflow as tf


class BatchFunction:
  """fn(batch) -> structure of tensors, as a tf.function per batch size that relaxes the other dimensions."""

  def __init__(self, fn):
    self._fn = fn
    self._by_batch_size = {}

  def __call__(self, batch):
    key = tuple(t.shape[0] if t.shape.rank else None for t in tf.nest.flatten(batch))
    if key not in self._by_batch_size:
      # TensorFlow counts traces per Python function (its code object) and warns of "excessive retracing" after
      # five: a partial (no code object of its own) gives each batch size its own count, as it has its own trace.
      self._by_batch_size[key] = tf.function(functools.partial(self._fn), autograph=False, reduce_retracing=True)
    return self._by_batch_size[key](batch)

  def TracingCount(self):
    """Traces so far, over all batch sizes."""
    return sum(f.experimental_get_tracing_count() for f in self._by_batch_size.values())
