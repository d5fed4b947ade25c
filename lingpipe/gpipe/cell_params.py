"""A pipeline cell's parameters as explicit inputs of its traced functions.

The cell's trainable variables are read once per step, on the replica's device, and their values
passed to every (micro-batch, cell) call; base_layer.VariablesAs makes the layers read them while
the cell is traced. So a replica's cell reads variables held on another device once per step instead
of in every call, and the backward takes gradients with respect to plain tensors. Reading a variable
shares its buffer: no copy of the weights. (A packed layout, one tensor per cell, would keep a
second copy of every weight, for no gain in time to first step once the steady ticks run as a loop.)
"""

import tensorflow as tf


class CellParams:
  """The trainable floating-point variables of one cell (each once), read as tensors in the dtype
  the cell computes with them: a bfloat16 cell casts its float32 weights once per step here, not in
  every micro-batch."""

  def __init__(self, variables, compute_dtypes=None):
    """`compute_dtypes`: {variable.ref(): dtype} to read a variable in (default: its own dtype)."""
    unique = {v.ref(): v for v in variables if v.dtype.is_floating and v.trainable}
    self.variables = list(unique.values())
    compute_dtypes = compute_dtypes or {}
    self.dtypes = [compute_dtypes.get(v.ref(), v.dtype) for v in self.variables]

  @classmethod
  def OfLayers(cls, layers):
    """The CellParams of `layers` (and their descendants), each variable read in its VariableFPropDtype."""
    dtypes = {var.ref(): layer.VariableFPropDtype(name) for top in layers for layer in top.Walk()
              for name, var in layer.vars.items() if var.dtype.is_floating}
    return cls([v for layer in layers for v in layer.trainable_variables], dtypes)

  def Read(self, copy_of=None):
    """The variables' current values in their compute dtypes, in self.variables order;
    `copy_of(variable)`: the variable to read instead (a replica's mirrored copy,
    distributed/mirrors.py)."""
    read = [copy_of(v) for v in self.variables] if copy_of else self.variables
    return [tf.convert_to_tensor(v) if v.dtype == d else tf.cast(v, d) for v, d in zip(read, self.dtypes)]

  def Values(self, tensors, copy_of=None):
    """{variable.ref(): tensor} for base_layer.VariablesAs, also keyed by each variable's `copy_of`
    (which the layers hold while they read a replica's copies)."""
    values = {v.ref(): t for v, t in zip(self.variables, tensors)}
    if copy_of:
      values.update({copy_of(v).ref(): t for v, t in zip(self.variables, tensors)})
    return values
