"""A cell's layers run as calls of one traced function per distinct layer, so that the step's traces grow by a
few ops per added layer instead of by the layer's whole graph.

Layers of a cell are the same kind when they are of one class with the same params but their name (a Transformer
stack, AmoebaNet's normal cells, the dense stacks). The first of a kind traces its forward once as a tf.function of
(inputs, its variables' values, its random seeds, the step's context), with every variable of the layer read from
those arguments (Lingvo's theta; base_layer.VariablesAs reads the cell's trainable ones once per step) and every
path-dependent value given for the layer called: the seed of its random masks per sub-layer (context.LayerSeed),
and the batch-norm moments returned as outputs and handed to the caller's collector under the called layer's own
sub-layers. Calls are inlined before they run (they carry no `_noinline`), so the devices run the same kernels as
the unrolled cell; the gradient TensorFlow builds for a call is built once per function (lingvo/core/repeat_layer.py
keeps the graph flat in depth the same way). A kind met once, and an export (a SavedModel keeps its graphs as
today), run unrolled.
"""

import contextlib

import tensorflow as tf

from lingpipe.core import context


def Slots(layer):
  """(sub-layer, variable name) of every variable of `layer` and its descendants, in a fixed order."""
  return [(sub, name) for sub in layer.Walk() for name in sub._var_names]  # pylint: disable=protected-access


@contextlib.contextmanager
def ReadingAs(slots, values):
  """Inside the block, the variable slots `slots` (of Slots) read as `values`."""
  held = [getattr(sub, name) for sub, name in slots]
  try:
    for (sub, name), value in zip(slots, values):
      object.__setattr__(sub, name, value)  # A value for tracing, as base_layer.VariablesAs sets.
    yield
  finally:
    for (sub, name), value in zip(slots, held):
      object.__setattr__(sub, name, value)


def _Kind(layer):
  """What makes two layers share a function: their class and params less their own name; None for a layer whose
  params have no text form or that asks to run unrolled (SHARES_TRACE)."""
  if not getattr(type(layer), 'SHARES_TRACE', True):
    return None
  try:
    text = layer.params.ToText()
  except Exception:  # pylint: disable=broad-except
    return None
  return (type(layer), ''.join(line for line in text.splitlines(True) if not line.startswith('name : ')))


class LayerFunctions:
  """The shared functions of the layers of one pipeline (any cell, any replica)."""

  def __init__(self):
    self._kinds = {}  # {layer path: its _Kind}
    self._functions = {}  # {(kind, baked context): tf.function}

  def Shared(self, layers):
    """The layers of `layers` whose kind occurs more than once among them."""
    kinds = [self._KindOf(layer) for layer in layers]
    return {id(layer) for layer, kind in zip(layers, kinds) if kind is not None and kinds.count(kind) > 1}

  def _KindOf(self, layer):
    if layer.path not in self._kinds:
      self._kinds[layer.path] = _Kind(layer)
    return self._kinds[layer.path]

  def Call(self, layer, inputs):
    """layer.FProp(inputs), as a call of its kind's function, in the current context (training, step seed,
    micro-batch, replica, real rows, batch-norm collector)."""
    step_seed, micro_batch = context.StepSeedValue(), context.CurrentMicroBatch()
    real_rows, collector = context.CurrentRealRows(), context.CurrentBatchNormStats()
    baked = (context.IsTraining(), context.CurrentReplica(), step_seed is None, micro_batch is None,
             None if real_rows is None else real_rows[0], collector is None)
    function = self._Function(layer, baked)
    subs = list(layer.Walk())
    values = [tf.convert_to_tensor(getattr(sub, name)) for sub, name in Slots(layer)]
    seeds = tf.constant([context.StaticLayerSeed(sub) for sub in subs], tf.int64)
    scalars = [tf.cast(x, tf.int64) for x in (step_seed, micro_batch) if x is not None] + (
        [tf.cast(real_rows[1], tf.int32)] if real_rows is not None else [])
    # The inputs pass through ops made here, under the caller's control dependencies (a timeline's start stamp):
    # once the call is inlined, its own control edges no longer hold its ops (timeline._Clock).
    inputs = tf.nest.map_structure(lambda t: t if t is None else tf.identity(t), inputs)
    outputs, moments = function(inputs, values, seeds, scalars)
    for index, part in moments.items():
      collector.Add(subs[int(index)], part)
    return outputs

  def _Function(self, layer, baked):
    """The tf.function of `layer`'s kind in context `baked`, traced with the first layer of the kind it met."""
    key = (self._KindOf(layer), baked)
    if key not in self._functions:
      self._functions[key] = tf.function(_Body(layer, baked), autograph=False)
    return self._functions[key]


def _Body(template, baked):
  """The traced forward of `template`'s kind in the context `baked` describes (LayerFunctions.Call)."""
  training, replica, no_step_seed, no_micro_batch, batch_dim, no_collector = baked
  subs = list(template.Walk())

  def Body(inputs, values, seeds, scalars):
    scalars = list(scalars)
    step_seed = None if no_step_seed else scalars.pop(0)
    micro_batch = None if no_micro_batch else scalars.pop(0)
    collector = None if no_collector else context.BatchNormStats()
    with ReadingAs(Slots(template), values), context.Training(training), context.Replica(replica), \
        context.StepSeed(step_seed), context.MicroBatch(micro_batch), \
        context.RealRows(batch_dim, scalars.pop(0)) if batch_dim is not None else contextlib.nullcontext(), \
        context.CollectBatchNormStats(collector), \
        context.LayerSeeds({sub.path: seeds[i] for i, sub in enumerate(subs)}):
      outputs = template.FProp(inputs)
    position = {sub.path: i for i, sub in enumerate(subs)}
    moments = {} if collector is None else {
        str(position[path]): part for path, (_, part) in collector.moments.items()}
    return outputs, moments

  return Body
