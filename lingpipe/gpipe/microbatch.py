"""Splitting a batch into micro-batches and merging them back.

A batch is a tensor or a NestedMap (any tf.nest structure) whose every leaf has the batch along
`batch_dim`. `Split` cuts each leaf into M equal parts; `Merge` concatenates the parts back. A batch
that M does not divide is an error unless `pad=True`, which appends zero rows to reach a multiple of
M; `Merge` then drops them (callers that reduce over the batch must mask the padded rows, see
`PadMask`).
"""

import tensorflow as tf

from lingpipe.core import errors


def _BatchSize(leaves, batch_dim):
  sizes = set()
  for path, leaf in leaves:
    shape = leaf.shape
    if shape.rank is None or shape.rank <= batch_dim:
      raise errors.ShapeError('Micro-batching along dim %d: field %s has shape %s, which has no such dimension.' %
                              (batch_dim, path or '(input)', shape))
    if shape[batch_dim] is None:
      raise errors.ShapeError('Micro-batching needs a static batch size; field %s has shape %s. Batch with '
                              'drop_remainder=True.' % (path or '(input)', shape))
    sizes.add(shape[batch_dim])
  if len(sizes) != 1:
    raise errors.ShapeError('Fields disagree on the batch size along dim %d: %s.' % (batch_dim, ', '.join(
        '%s=%s' % (p or '(input)', l.shape[batch_dim]) for p, l in leaves)))
  return sizes.pop()


def _PathsAndLeaves(batch):
  if isinstance(batch, dict):
    from lingpipe.core.nested_map import NestedMap  # pylint: disable=g-import-not-at-top
    paths = NestedMap(batch).Keys()
  else:
    paths = [''] * len(tf.nest.flatten(batch))
  return [(path, tf.convert_to_tensor(leaf)) for path, leaf in zip(paths, tf.nest.flatten(batch))]


def NumPadRows(batch_size, num_micro_batches):
  return -batch_size % num_micro_batches


def Split(batch, num_micro_batches, batch_dim=0, pad=False):
  """Returns (list of M micro-batches with the structure of `batch`, number of zero rows appended)."""
  leaves = _PathsAndLeaves(batch)
  if not leaves:
    raise errors.ConfigError('Cannot micro-batch an input with no tensors.')
  batch_size = _BatchSize(leaves, batch_dim)
  m = num_micro_batches
  if m < 1:
    raise errors.ConfigError('num_micro_batches must be >= 1, got %d.' % m)
  if m > batch_size:
    raise errors.ConfigError('num_micro_batches %d is larger than the batch size %d; use at most %d micro-batches '
                             'or a larger batch.' % (m, batch_size, batch_size))
  pad_rows = NumPadRows(batch_size, m)
  if pad_rows and not pad:
    raise errors.ConfigError('Batch size %d is not divisible by num_micro_batches %d. Use a batch size that is a '
                             "multiple of %d (e.g. %d) or another micro-batch count; a PipeliningLayer with "
                             "schedule='gpipe' also takes pad=True (zero rows, dropped from its outputs)." % (
                                 batch_size, m, m, batch_size + pad_rows))
  parts = [tf.split(_Pad(leaf, batch_dim, pad_rows), m, axis=batch_dim) for _, leaf in leaves]
  micro = [tf.nest.pack_sequence_as(batch, [p[i] for p in parts]) for i in range(m)]
  return micro, pad_rows


def Cut(batch, num_micro_batches, batch_dim=0, pad=False):
  """(Split's micro-batches, the same as Stacked's [M, <micro-batch>] leaves, the number of zero rows appended):
  what a pipeline's phase takes, as a list (unrolled) or stacked (looped; in a traced step the form not used is
  pruned)."""
  micro, pad_rows = Split(batch, num_micro_batches, batch_dim, pad)
  return micro, Stacked(batch, num_micro_batches, batch_dim, pad_rows), pad_rows


def Stacked(batch, num_micro_batches, batch_dim=0, pad_rows=0):
  """`batch` (as Split cut it, with its pad rows) as [M, <micro-batch>] leaves whose index m is
  micro-batch m: for batch_dim 0 a reshape, which shares the batch's buffer; otherwise a stack of
  the parts (a copy)."""
  m = num_micro_batches

  def One(leaf):
    leaf = _Pad(leaf, batch_dim, pad_rows)
    if batch_dim:
      return tf.stack(tf.split(leaf, m, axis=batch_dim))
    stacked = tf.reshape(leaf, tf.concat([[m, -1], tf.shape(leaf)[1:]], 0))
    return tf.ensure_shape(stacked, [m, None if leaf.shape[0] is None else leaf.shape[0] // m] +
                           leaf.shape[1:].as_list())

  return tf.nest.map_structure(One, batch)


def _Pad(leaf, batch_dim, pad_rows):
  if not pad_rows:
    return leaf
  paddings = [[0, 0]] * leaf.shape.rank
  paddings[batch_dim] = [0, pad_rows]
  return tf.pad(leaf, paddings)


def Merge(micro_batches, batch_dim=0, pad_rows=0):
  """Concatenates micro-batches along batch_dim and drops `pad_rows` trailing rows."""
  flats = [tf.nest.flatten(mb) for mb in micro_batches]
  merged = []
  for parts in zip(*flats):
    leaf = parts[0] if len(parts) == 1 else tf.concat(parts, axis=batch_dim)
    merged.append(_DropPadRows(leaf, batch_dim, pad_rows))
  return tf.nest.pack_sequence_as(micro_batches[0], merged)


def _DropPadRows(leaf, batch_dim, pad_rows):
  if not pad_rows:
    return leaf
  size = leaf.shape[batch_dim]  # Static when known, so the merged leaf keeps a static batch size.
  size = tf.shape(leaf)[batch_dim] if size is None else size
  return tf.gather(leaf, tf.range(size - pad_rows), axis=batch_dim)


def PadMask(batch_size, num_micro_batches, dtype=tf.float32):
  """[padded batch] mask: 1 for real rows, 0 for the rows Split(pad=True) appended."""
  pad_rows = NumPadRows(batch_size, num_micro_batches)
  return tf.concat([tf.ones([batch_size], dtype), tf.zeros([pad_rows], dtype)], axis=0)


def MergeStacked(stacked, batch_dim=0, pad_rows=0):
  """Merge for micro-batches stacked along a new leading axis ([M, <micro-batch>] leaves)."""
  if batch_dim:
    num_micro = tf.nest.flatten(stacked)[0].shape[0]
    return Merge([tf.nest.map_structure(lambda s, m=m: s[m], stacked) for m in range(num_micro)], batch_dim,
                 pad_rows)

  def Rows(leaf):  # The micro-batches are contiguous rows: a reshape, no copy.
    merged = tf.reshape(leaf, tf.concat([[-1], tf.shape(leaf)[2:]], 0))
    if leaf.shape[1] is not None:
      merged = tf.ensure_shape(merged, [leaf.shape[0] * leaf.shape[1]] + leaf.shape[2:].as_list())
    return _DropPadRows(merged, 0, pad_rows)

  return tf.nest.map_structure(Rows, stacked)
