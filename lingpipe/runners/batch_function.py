"""A tf.function over batches that traces once per batch size, not once per sequence length.

Length-bucketed inputs (translation) give every batch the same size but one of many padded lengths. A plain
tf.function traces the step again for each new (source, target) length pair, and a trace of a pipelined
Transformer costs many steps, and memory that stays with the process (about 65 MiB a Transformer layer in a
trainer beside workers: docs/notes/capacity.md). Where the dataset's element spec says which dimensions vary
(unknown in `element_spec`, as tf.data's padded and bucketed batches leave them), the step is traced once with
them unknown. Without a spec, `reduce_retracing` lets TensorFlow trace once more with the varying dimensions
unknown, and reuse that trace for every later length: two traces, both kept.

The batch dimension stays static either way: micro-batching needs it (microbatch.Split). So batches are first
told apart by their leaves' leading dimension, and each batch size gets its own function; the leading dimension
is taken to be the batch, as lingpipe's input generators make it.
"""

import functools

import tensorflow as tf


class BatchFunction:
  """fn(batch) -> structure of tensors, as a tf.function per batch size that relaxes the other dimensions:
  those unknown in `element_spec` (the dataset's, a structure of tf.TensorSpec like the batches) from the first
  trace, else those that vary (reduce_retracing)."""

  def __init__(self, fn, element_spec=None):
    self._fn = fn
    self._element_spec = element_spec
    self._by_batch_size = {}

  def __call__(self, batch):
    key = tuple(t.shape[0] if t.shape.rank else None for t in tf.nest.flatten(batch))
    if key not in self._by_batch_size:
      # TensorFlow counts traces per Python function (its code object) and warns of "excessive retracing" after
      # five: a partial (no code object of its own) gives each batch size its own count, as it has its own trace.
      signature = _Signature(self._element_spec, batch)
      if signature is None:
        self._by_batch_size[key] = tf.function(functools.partial(self._fn), autograph=False, reduce_retracing=True)
      else:
        self._by_batch_size[key] = tf.function(functools.partial(self._fn), autograph=False,
                                               input_signature=[signature])
    return self._by_batch_size[key](batch)

  def TracingCount(self):
    """Traces so far, over all batch sizes."""
    return sum(f.experimental_get_tracing_count() for f in self._by_batch_size.values())


def _Signature(element_spec, batch):
  """`element_spec` with each leaf's leading dimension that of `batch`'s leaf, or None without a spec or where
  the two differ in structure, dtype or a known dimension."""
  if element_spec is None:
    return None
  try:
    tf.nest.assert_same_structure(element_spec, batch, check_types=False)
  except (TypeError, ValueError):
    return None

  def Leaf(spec, t):
    if not isinstance(spec, tf.TensorSpec) or spec.dtype != t.dtype or spec.shape.rank != t.shape.rank:
      return None
    if not spec.shape.rank:
      return spec
    shape = tf.TensorShape([t.shape[0]]).concatenate(spec.shape[1:])
    return tf.TensorSpec(shape, spec.dtype) if shape.is_compatible_with(t.shape) else None

  leaves = [Leaf(spec, t) for spec, t in zip(tf.nest.flatten(element_spec), tf.nest.flatten(batch))]
  if any(leaf is None for leaf in leaves):
    return None
  return tf.nest.pack_sequence_as(batch, leaves)
