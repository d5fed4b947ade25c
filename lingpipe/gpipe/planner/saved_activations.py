"""What a layer's backward reads from its forward: the activations a pipeline keeps per micro-batch.

FPropMeta gives a layer's output shapes, but a backward also reads what the layer computed inside (a
Transformer layer's attention probabilities, its feed-forward hidden units, layer-norm statistics,
dropout masks), which on the Transformer workload is most of the memory. `Describe(layer_params,
input_shapes)` finds those tensors the way the runtime keeps them: it builds the layer abstractly
(no weights allocated), traces its training forward and its gradient into a scratch graph with
placeholders for the inputs and the weights, and sums the bytes of the forward tensors that a
gradient op reads. Nothing runs, so a layer of any size is described on any machine.

Views share their input's buffer (Identity, Reshape, ExpandDims, Squeeze), so a tensor read through
one is counted once, as its source; the layer's inputs and outputs are left out (the planner counts
each boundary once, as the output of the layer before). Small tensors the step keeps anyway
(constants, shapes) are left out too.

`fused_internal` is what a compiler that fuses element-wise ops and transposes into their consumers
(XLA, as on the GPipe paper's TPUs) would keep instead: only the tensors the backward's matrix
products and convolutions read, followed back through views and transposes. A layer norm's centred
inputs, a scaled query or a transposed head are then re-derived inside a fusion rather than kept.
This is an estimate of such a compiler, not a measurement: lingpipe's own runtime (TensorFlow's
executor) keeps what `internal` counts.
"""

from typing import NamedTuple, Optional

import tensorflow as tf

from lingpipe.core import errors

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core.nested_map import NestedMap

# Ops whose output is a view of their first input: the backward reading it keeps the input's buffer
# alive.
_VIEWS = ('Identity', 'Reshape', 'ExpandDims', 'Squeeze', 'StopGradient', 'Snapshot')
_FREE = ('Const', 'Shape', 'ShapeN', 'Size', 'Rank', 'Placeholder', 'VarHandleOp', 'ReadVariableOp')
# What a fusing compiler keeps for: the inputs of the gradient's matrix products and convolutions.
_PRODUCTS = ('MatMul', 'BatchMatMul', 'BatchMatMulV2', 'BatchMatMulV3', 'Einsum', 'Conv2D', 'Conv2DBackpropInput',
             'Conv2DBackpropFilter', 'DepthwiseConv2dNative', 'DepthwiseConv2dNativeBackpropInput',
             'DepthwiseConv2dNativeBackpropFilter')


class Saved(NamedTuple):
  """Bytes a layer's backward reads from its forward, for the whole batch it was described on."""
  internal: int  # tensors computed inside the layer (neither its inputs nor its outputs)
  reads_inputs: bool  # the backward reads the layer's inputs
  fused_internal: int = 0  # what a fusing compiler would keep of them (the module docstring)
  passed_on: int = 0  # bytes of the outputs that are its inputs handed on (an AmoebaNet cell's previous state)


def _Root(tensor, views=_VIEWS):
  while tensor.op.type in views and tensor.op.inputs:
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
    # The weights as a pipeline cell reads them: in their compute dtype, cast once per step outside
    # the cell.
    abstract = {v: tf.compat.v1.placeholder(l.VariableFPropDtype(name), v.shape) for l in layer.Walk()
                for name, v in l.vars.items()}
    inputs = _Placeholders(shapes, dtype)
    # Batch norm hands its moments over, as inside a pipeline (the averages move outside the cells).
    with context.Training(True), context.CollectBatchNormStats(context.BatchNormStats(discard=True)), \
        base_layer.VariablesAs([layer], abstract):
      outputs = layer.FProp(inputs)
    forward = set(graph.get_operations())
    flat_in = [t for t in tf.nest.flatten(inputs) if t.dtype.is_floating]
    flat_out = [t for t in tf.nest.flatten(outputs) if t.dtype.is_floating]
    weights = [t for t in abstract.values() if t.dtype.is_floating]
    tf.gradients(flat_out, flat_in + weights, grad_ys=[tf.compat.v1.placeholder(t.dtype, t.shape) for t in flat_out])
    backward = [op for op in graph.get_operations() if op not in forward]
    read = {_Root(t).ref(): _Root(t) for op in backward for t in op.inputs if t.op in forward}
    fusing = _VIEWS + ('Transpose',)
    products = {_Root(t, fusing).ref(): _Root(t, fusing) for op in backward if op.type in _PRODUCTS
                for t in op.inputs if t.op in forward}
  inputs_ref = {t.ref() for t in tf.nest.flatten(inputs)}
  outputs_ref = {_Root(t).ref() for t in tf.nest.flatten(outputs)}

  def Internal(tensors):
    return sum(_Bytes(t) for ref, t in tensors.items()
               if ref not in inputs_ref and ref not in outputs_ref and t.op.type not in _FREE)
  passed_on = sum(_Bytes(t) for t in {_Root(t).ref(): _Root(t) for t in tf.nest.flatten(outputs)}.values()
                  if t.ref() in inputs_ref)
  return Saved(Internal(read), any(ref in inputs_ref for ref in read), Internal(products), passed_on)


_CACHE = {}


def Describe(layer_params, input_shapes, dtype=tf.float32) -> Optional[Saved]:
  """Saved of the layer `layer_params` on inputs of `input_shapes` (a TensorShape, or a dict of them
  for NestedMap inputs) of `dtype`, or None where the layer cannot be traced so (e.g. it reads
  integer ids): the planner then counts its outputs alone. Layers of equal Params and shapes are
  traced once."""
  if isinstance(input_shapes, dict):
    shapes_key = tuple(sorted((k, tuple(tf.TensorShape(v).as_list())) for k, v in input_shapes.items()))
  else:
    shapes_key = tuple(tf.TensorShape(input_shapes).as_list())
  try:
    text = layer_params.ToText()
  except errors.ConfigError:  # A param with no text form (a Keras layer): traced each time, not kept.
    text = None
  key = (layer_params.cls, text, shapes_key, tf.as_dtype(dtype).name)
  if text is None or key not in _CACHE:
    try:
      _CACHE[key] = _Trace(layer_params, input_shapes, tf.as_dtype(dtype))
    except (TypeError, ValueError, NotImplementedError, LookupError, AttributeError):
      # Not traceable on float inputs: planned from its outputs (see above).
      _CACHE[key] = None
  return _CACHE[key]
