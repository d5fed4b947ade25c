"""A cell's gradient, built once: the re-computing backward reuses the gradient TensorFlow builds
for the cell's traced function, which a taped forward needs anyway.

For the gradient of a function call TensorFlow builds, once per traced function, a pair: a forward
that also returns every tensor of the function its gradient reads, and a backward function that
takes them. A backward that uses kept activations (a forward on a tape) gets that pair through the
tape. The re-computing backward (gradient_sums.SummingBackward) used to trace the cell's layers again
and differentiate them op by op, so under remat 'always', whose last micro-batch is taped
(schedule.KeepWhereBackwardFollows), each cell's gradient was built twice.

`CellGradient.Backward` copies the pair's forward and backward ops into the caller's graph (the
re-computing backward's function, traced once per cell). Calling them would cost memory and time:
they are never inlined when the cell's function is not (one call per micro-batch keeps the graph
flat in M), a call that is not inlined keeps all its inputs, here every re-computed activation,
alive until it ends (a higher peak under remat 'always'), and each re-computing backward function
instantiated them again. Copied, each activation is freed once its gradient is done, as before.

The same pair lets a forward that keeps its activations run in a loop (remat 'never' in GPipe's
looped passes): a GradientTape cannot outlive a tf.while_loop iteration, so taped forwards ran
unrolled and the graph grew with M. `SavingForward` calls the pair's forward, which returns the
call's outputs and the tensors its backward reads (the executor pushes them on a stack per cell),
and `SavedBackward` runs the pair's backward on them, copied into a function of its own that adds
each parameter gradient to the cell's sum as it comes (gradient_sums.py): the same ops as the two
calls a tape makes (TensorFlow rewrites a taped call into the pair's forward), without the
micro-batch's whole gradient beside the sum.

The pair comes from `ConcreteFunction._delayed_rewrite_functions`, which is not public API:
tests/test_cell_gradient.py fails at once if a TensorFlow upgrade moves it.
"""

from typing import Any, List, NamedTuple

import tensorflow as tf
from tensorflow.python.eager import backprop_util  # pylint: disable=g-direct-tensorflow-import

from lingpipe.gpipe.engine import remat


class _Pair(NamedTuple):
  """TensorFlow's forward/backward pair for one traced cell function."""
  concrete: Any  # the cell's ConcreteFunction; its FuncGraph is the forward: the call's outputs, then the saved tensors
  forward: Any  # the pair's forward function (what a taped call of `concrete` becomes)
  num_outputs: int  # how many of the forward's outputs are the call's own
  backward: Any  # the pair's backward function: inputs are one gradient per trainable output, then captures
  backward_captures: List  # what the backward captured: forward graph tensors (saved by the forward) or outer ones
  # Per saved tensor, what it is where it is the same in every call, else None: the index of the
  # call argument (flat: inputs, index, params, captures) it is, for a parameter or a capture, or
  # the value of a small constant.
  same_in_every_call: List


class CellGradient:
  """fn(inputs, micro_batch_index, params) -> (outputs, ...) (a cell's tf.function), re-computed and
  differentiated through the forward/backward pair TensorFlow builds for its gradient, or run as
  that pair's two calls."""

  def __init__(self, fn):
    self._fn = fn
    self._pairs = {}
    self._graph_defs = {}
    self._saved_backwards = {}  # {(trace, sums): the saved backward's function (SavedBackward)}

  def Pair(self, args):
    """The _Pair of fn's trace for args = (inputs, micro_batch_index, params), built on first use."""
    concrete = self._fn.get_concrete_function(*args)
    if concrete.name not in self._pairs:
      rewrite = concrete._delayed_rewrite_functions  # pylint: disable=protected-access
      # The call's own outputs (forward_backward appends the saved tensors to the graph's outputs).
      # A tape asks for the pair with one gradient per output of the call: this is the pair a taped
      # forward of fn uses.
      num_outputs = rewrite._num_inference_outputs  # pylint: disable=protected-access
      forward, backward = rewrite.forward_backward(num_outputs)
      first_same = len(tf.nest.flatten(args[:2]))
      position = {t.ref(): i for i, t in enumerate(concrete.graph.inputs) if i >= first_same}
      # Small constants (shapes, scalars) are made again where the backward is called; a large one
      # (a table) is pushed like an activation, by reference, rather than copied into the graph at
      # each call site.
      small = lambda t: t.op.type == 'Const' and t.shape.num_elements() <= 1024
      # What a call of a layer's function (layer_functions.py) saves of its own arguments (its weights) is
      # that argument: seen through the call, a weight is not pushed per micro-batch.
      saved = [_PassedThrough(t, concrete.graph) for t in concrete.graph.outputs[num_outputs:]]
      same = [tf.get_static_value(t) if small(t) else position.get(t.ref()) for t in saved]
      self._pairs[concrete.name] = _Pair(concrete, forward, num_outputs, backward, list(backward.captured_inputs),
                                         same)
    return self._pairs[concrete.name]

  def _GraphDefs(self, pair):
    """(forward GraphDef, backward GraphDef) of `pair`, to copy (Backward)."""
    if pair.concrete.name not in self._graph_defs:
      self._graph_defs[pair.concrete.name] = (_WithoutColocation(pair.concrete.graph.as_graph_def()),
                                              _WithoutColocation(pair.backward.graph.as_graph_def()))
    return self._graph_defs[pair.concrete.name]

  def Backward(self, inputs, micro_batch_index, params, upstream, wanted=None):
    """(input grads, param grads) of fn's first output for `upstream`, re-computing fn once
    `upstream` exists, as remat.Backward: input grads follow tf.nest.flatten(inputs), None for
    leaves not `wanted` (remat.WantsGrad); param grads follow `params`, zeros for unused ones; the
    input grads wait for the param grads."""
    inputs = remat.AfterGradient(inputs, upstream)
    args = (inputs, micro_batch_index, params)
    pair = self.Pair(args)
    forward_def, backward_def = self._GraphDefs(pair)
    flat = _Copy(pair.concrete.graph, forward_def, tf.nest.flatten(args) + list(pair.concrete.captured_inputs),
                 'cell_forward')
    captures = _Captures(pair, flat[pair.num_outputs:])
    grads = _Unflatten(pair.backward.graph.structured_outputs,
                       _Copy(pair.backward.graph, backward_def, _OutputGrads(pair, upstream) + captures,
                             'cell_backward'))
    return _Grads(grads, inputs, micro_batch_index, params, wanted)

  def SavingForward(self, inputs, micro_batch_index, params):
    """(fn's outputs, the tensors its backward reads): one call of the pair's forward."""
    args = (inputs, micro_batch_index, params)
    pair = self.Pair(args)
    flat = pair.forward.call_flat(*(tf.nest.flatten(args) + list(pair.concrete.captured_inputs)))
    outputs = tf.nest.pack_sequence_as(pair.concrete.structured_outputs, list(flat[:pair.num_outputs]))
    return outputs, list(flat[pair.num_outputs:])

  def Varying(self, inputs, params, saved):
    """Of what SavingForward saved, the tensors that differ between calls (Restore gives back the
    rest: parameters, captures, constants; a Transformer layer's backward reads 37 tensors, its 8
    weights and 6 constants among them)."""
    pair = self.Pair((inputs, tf.TensorSpec([], tf.int64), params))
    return [t for t, same in zip(saved, pair.same_in_every_call) if same is None]

  def VaryingSpecs(self, inputs, params):
    """tf.TensorSpec of each tensor Varying returns, for inputs and params like these."""
    pair = self.Pair((inputs, tf.TensorSpec([], tf.int64), params))
    return [tf.TensorSpec(t.shape, t.dtype)
            for t in self.Varying(inputs, params, pair.concrete.graph.outputs[pair.num_outputs:])]

  def Restore(self, inputs, params, varying):
    """What SavingForward saved, from what Varying kept of it."""
    args = (inputs, tf.TensorSpec([], tf.int64), params)
    pair = self.Pair(args)
    flat_args = tf.nest.flatten(args) + list(pair.concrete.captured_inputs)
    varying = iter(varying)
    return [next(varying) if same is None else flat_args[same] if isinstance(same, int) else tf.constant(same)
            for same in pair.same_in_every_call]

  def SavedBackward(self, inputs, micro_batch_index, params, saved, upstream, sums, token, wanted=None):
    """(input grads as Backward's, token) for the SavingForward call that returned `saved`: one call
    of a function that copies the pair's backward and adds each parameter gradient to `sums`
    (gradient_sums.GradientSums; `token`: of the sum so far) as soon as it exists. Calling the pair's
    backward itself returns all of a micro-batch's parameter gradients together, at its end, beside
    the sum: only the cell's first backward (`token` None), whose gradients start the sum, calls it.
    `inputs` are read only for their structure and dtypes."""
    pair = self.Pair((inputs, micro_batch_index, params))
    flat_inputs = tf.nest.flatten(inputs)
    if token is None:
      # All at once is no more than the sum they start, and the step needs no copy of the cell's backward.
      call = pair.backward._call_flat  # pylint: disable=protected-access
      grads = call(_OutputGrads(pair, upstream), _Captures(pair, saved))
      input_grads, param_grads = _Grads(grads, inputs, micro_batch_index, params, wanted)
      return input_grads, sums.Add(param_grads, first=True)
    key = (pair.concrete.name, id(sums))
    if key not in self._saved_backwards:
      _, backward_def = self._GraphDefs(pair)
      first_param = len(flat_inputs) + len(tf.nest.flatten(micro_batch_index))
      num_params = len(params)

      def CellBackward(output_grads, captures, token):
        grads = _Unflatten(pair.backward.graph.structured_outputs,
                           _Copy(pair.backward.graph, backward_def, output_grads + captures, 'cell_backward'))
        return grads[:len(flat_inputs)], sums.Add(grads[first_param:first_param + num_params], first=False)

      self._saved_backwards[key] = tf.function(CellBackward, autograph=False,
                                               experimental_attributes={'_noinline': True})
    grads, token = self._saved_backwards[key](_OutputGrads(pair, upstream), _Captures(pair, saved), token)
    return [(tf.zeros_like(x) if g is None else g) if w else None
            for x, g, w in zip(flat_inputs, grads, remat.WantsGrad(flat_inputs, wanted))], token


def _PassedThrough(t, graph):
  """The tensor of `graph` that `t` is unchanged: through Identity ops, and through the outputs of function calls
  that return one of their arguments (a constant inside a call stays as it is there)."""
  while True:
    if t.op.type == 'Identity':
      t = t.op.inputs[0]
      continue
    if t.op.type not in ('PartitionedCall', 'StatefulPartitionedCall'):
      return t
    inner = graph._get_function(t.op.get_attr('f').name)  # pylint: disable=protected-access
    inner_graph = getattr(inner, 'graph', None)
    if inner_graph is None:
      return t
    through = _PassedThrough(inner_graph.outputs[t.value_index], inner_graph)
    arguments = [x.ref() for x in inner_graph.inputs]
    if through.ref() in arguments:
      t = t.op.inputs[arguments.index(through.ref())]
      continue
    return through if through.op.type == 'Const' else t


def _OutputGrads(pair, upstream):
  """What the pair's backward takes first: one gradient per trainable output of the call, in order:
  `upstream` for fn's first output, zeros for the rest (batch-norm moments, timestamps)."""
  grads = list(tf.nest.flatten(upstream)) + [None] * pair.num_outputs
  return [tf.zeros_like(out) if grad is None else tf.cast(grad, out.dtype)
          for out, grad in zip(pair.concrete.graph.outputs[:pair.num_outputs], grads)
          if backprop_util.IsTrainable(out)]


def _Captures(pair, saved):
  """The backward's captured tensors, with the forward graph's replaced by `saved`, the forward's extra outputs."""
  by_ref = dict(zip([t.ref() for t in pair.concrete.graph.outputs[pair.num_outputs:]], saved))
  return [by_ref.get(c.ref(), c) for c in pair.backward_captures]


def _Grads(grads, inputs, micro_batch_index, params, wanted):
  """(input grads, param grads) as remat.WeightsFirst gives them, from the backward's gradient per forward input."""
  flat_inputs = tf.nest.flatten(inputs)
  first_param = len(flat_inputs) + len(tf.nest.flatten(micro_batch_index))
  return remat.WeightsFirst(grads[first_param:first_param + len(params)], params, grads[:len(flat_inputs)],
                            flat_inputs, remat.WantsGrad(flat_inputs, wanted))


def _Copy(graph, graph_def, inputs, name):
  """graph's outputs, computed from `inputs` (one per graph input) by a copy of its ops in the
  current graph. Outside the caller's control dependencies: the importer compares them with `in`,
  which fails for a tensor. The copied ops need none: what they compute waits for `inputs` (the
  re-computation's are gated on the gradient)."""
  with tf.control_dependencies(None):
    # The importer takes tensors of the current graph only; a call would capture the others (an
    # outer graph's step seed, a closed-over constant), and so does this.
    current = tf.compat.v1.get_default_graph()
    inputs = [x if getattr(x, 'graph', None) is current else current.capture(x) for x in inputs]
    return tf.graph_util.import_graph_def(graph_def, input_map=dict(zip([t.name for t in graph.inputs], inputs)),
                                          return_elements=[t.name for t in graph.outputs], name=name)


def _WithoutColocation(graph_def):
  """graph_def without colocation constraints: gradient ops ask to sit with the forward ops they
  differentiate (e.g. a gather's gradient with its parameters), which are not in the copy; it runs
  on the caller's device."""
  for node in graph_def.node:
    if '_class' in node.attr:
      del node.attr['_class']
  return graph_def


def _Unflatten(structure, flat):
  """Per input of the forward, its gradient (None where it has none), from the backward's flat output tensors."""
  flat = iter(flat)
  return [None if s is None else tf.nest.pack_sequence_as(
      s, [next(flat) for _ in tf.nest.flatten(s, expand_composites=True)], expand_composites=True) for s in structure]
