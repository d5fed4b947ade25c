"""Parameter packing: a pipeline cell's trainable variables as one tensor per dtype.

Why: every (micro-batch, cell) task is a call of the cell's traced function, and a function that reads variables
takes one input per variable (and its backward one more per accumulated gradient). Graph optimization and
partitioning cost grows with the number of edges, so with ~40 variables per cell the M x K calls made time to first
step grow steeply in M (measured for a 12-layer Transformer at K=4: 17k edges and 7.1 s for the first run at M=32,
of which 3.7 s in two graph passes linear in edges). Packed, a call has a handful of inputs.

Layout: each variable is flattened, zero-padded to a whole number of 64-byte rows and stacked as a [rows, row]
matrix. Splitting along rows at row boundaries hands out aligned slices of the same buffer (TensorFlow shares the
buffer instead of copying), so unpacking inside a call costs nearly nothing, and the gradient of the unpacking is
one concat: the packed gradient, which the pipeline accumulates over micro-batches as one tensor.
"""

import tensorflow as tf

_ROW_BYTES = 64  # Eigen's largest alignment on CPU (AVX-512).


class Packing:
  """How the trainable floating-point variables of one cell map to packed tensors (one per dtype)."""

  def __init__(self, variables):
    unique = {v.ref(): v for v in variables if v.dtype.is_floating and v.trainable}  # A shared variable once.
    self.variables = list(unique.values())
    self.dtypes = sorted({v.dtype for v in self.variables}, key=lambda d: d.name)
    # Per dtype: the indices into self.variables, and each variable's row count.
    self._members = {d: [i for i, v in enumerate(self.variables) if v.dtype == d] for d in self.dtypes}
    self._rows = [-(-max(v.shape.num_elements(), 1) // self._Width(v.dtype)) for v in self.variables]

  @staticmethod
  def _Width(dtype):
    return max(_ROW_BYTES // dtype.size, 1)

  def Pack(self):
    """The packed values: a list of [rows, width] tensors, one per dtype (read the variables once)."""
    packed = []
    for d in self.dtypes:
      width = self._Width(d)
      parts = []
      for i in self._members[d]:
        flat = tf.reshape(self.variables[i], [-1])
        pad = self._rows[i] * width - self.variables[i].shape.num_elements()
        if pad:
          flat = tf.concat([flat, tf.zeros([pad], d)], 0)
        parts.append(tf.reshape(flat, [self._rows[i], width]))
      packed.append(tf.concat(parts, 0) if len(parts) > 1 else parts[0])
    return packed

  def Unpack(self, packed):
    """The per-variable tensors (in self.variables order) of packed tensors (values or gradients)."""
    out = [None] * len(self.variables)
    for d, tensor in zip(self.dtypes, packed):
      members = self._members[d]
      pieces = tf.split(tensor, [self._rows[i] for i in members], axis=0) if len(members) > 1 else [tensor]
      for i, piece in zip(members, pieces):
        var = self.variables[i]
        flat = tf.reshape(piece, [-1])
        if flat.shape[0] != var.shape.num_elements():
          flat = flat[:var.shape.num_elements()]
        out[i] = tf.reshape(flat, var.shape)
    return out

  def Values(self, packed):
    """{variable.ref(): tensor} for base_layer.VariablesAs."""
    return {v.ref(): t for v, t in zip(self.variables, self.Unpack(packed))}

  def Zeros(self):
    """Packed zeros (the start of a gradient accumulation)."""
    return [tf.zeros([sum(self._rows[i] for i in self._members[d]), self._Width(d)], d) for d in self.dtypes]
