"""What a layer's backward reads from its forward: the activations a pipeline keeps per micro-batch.

FPropMeta gives a layer's output shapes, but a backward also reads what the layer computed inside (a Transformer
layer's attention probabilities, its feed-forward hidden units, layer-norm statistics, dropout masks), which on the
Transformer workload is most of the memory. `Describe(layer_params, input_shapes)` finds those tensors the way the
runtime keeps them: it builds the layer abstractly (no weights allocated), traces its training forward and its
gradient into a scratch graph with placeholders for the inputs and the weights, and sums the bytes of the forward
tensors that a gradient op reads. Nothing runs, so a layer of any size is described on any machine.

Views share their input's buffer (Identity, Reshape, ExpandDims, Squeeze), so a tensor read through one is counted
once, as its source; the layer's inputs and outputs are left out (the planner counts each boundary once, as the
output of the layer before). Small tensors the step keeps anyway (constants, shapes) are left out too.
"""

from typing import NamedTuple, Optional

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core.nested_map import NestedMap

# Ops whose output is a view of their first input: the backward reading it keeps the input's buffer alive.
_VIEWS = ('Identity', 'Reshape', 'ExpandDims', 'Squeeze', 'StopGradient', 'Snapshot')
_FREE = ('Const', 'Shape', 'ShapeN', 'Size', 'Rank', 'Placeholder', 'VarHandleOp', 'ReadVariableOp')


class Saved(NamedTuple):
  """Bytes a layer's backward reads from its forward, for the whole batch it was described on."""
  internal: int  # tensors computed inside the layer (neither its inputs nor its outputs)
  reads_inputs: bool  # the backward reads the layer's inputs


def _Root(tensor):
  while tensor.op.type in _VIEWS and tensor.op.inputs:
    tensor = tensor.op.inputs[0]
  return tensor


def _Bytes(tensor):
  shape = tensor.shape
  if not shape.is_fully_defined():
    return 0
  return shape.num_elements() * tensor.dtype.size


def _Placeholders(shapes, dtype):
  if isinstance(shapes, dict):  # NestedMap inputs.
    return NestedMap({k: tf.compat.v1.placeholder(dtype, v) for k, v in shapes.items()})
  return tf.compat.v1.placeholder(dtype, shapes)


def _Trace(layer_params, shapes, dtype):
  """Saved of one layer, traced into a scratch graph (see the module docstring)."""
  graph = tf.Graph()
  with graph.as_default():
    with base_layer.AbstractVariables():
      layer = layer_params.Copy().Set(name=layer_params.name or 'layer').Instantiate()
    abstract = {v: tf.compat.v1.placeholder(v.dtype, v.shape) for l in layer.Walk() for v in l.vars.values()}
    inputs = _Placeholders(shapes, dtype)
    with context.Training(True), base_layer.VariablesAs([layer], abstract):
      outputs = layer.FProp(inputs)
    forward = set(graph.get_operations())
    flat_in = [t for t in tf.nest.flatten(inputs) if t.dtype.is_floating]
    flat_out = [t for t in tf.nest.flatten(outputs) if t.dtype.is_floating]
    weights = [t for t in abstract.values() if t.dtype.is_floating]
    tf.gradients(flat_out, flat_in + weights, grad_ys=[tf.compat.v1.placeholder(t.dtype, t.shape) for t in flat_out])
    read = {_Root(t).ref(): _Root(t) for op in graph.get_operations() if op not in forward for t in op.inputs
            if t.op in forward}
  inputs_ref = {t.ref() for t in tf.nest.flatten(inputs)}
  outputs_ref = {_Root(t).ref() for t in tf.nest.flatten(outputs)}
  internal = sum(_Bytes(t) for ref, t in read.items()
                 if ref not in inputs_ref and ref not in outputs_ref and t.op.type not in _FREE)
  return Saved(internal, any(ref in inputs_ref for ref in read))


_CACHE = {}


def Describe(layer_params, input_shapes, dtype=tf.float32) -> Optional[Saved]:
  """Saved of the layer `layer_params` on inputs of `input_shapes` (a TensorShape, or a dict of them for NestedMap
  inputs) of `dtype`, or None where the layer cannot be traced so (e.g. it reads integer ids): the planner then
  counts its outputs alone. Layers of equal Params and shapes are traced once."""
  if isinstance(input_shapes, dict):
    shapes_key = tuple(sorted((k, tuple(tf.TensorShape(v).as_list())) for k, v in input_shapes.items()))
  else:
    shapes_key = tuple(tf.TensorShape(input_shapes).as_list())
  key = (layer_params.cls, layer_params.ToText(), shapes_key, tf.as_dtype(dtype).name)
  if key not in _CACHE:
    try:
      _CACHE[key] = _Trace(layer_params, input_shapes, tf.as_dtype(dtype))
    except (TypeError, ValueError, NotImplementedError, LookupError, AttributeError) as e:
      del e  # Not traceable on float inputs: planned from its outputs (see above).
      _CACHE[key] = None
  return _CACHE[key]
