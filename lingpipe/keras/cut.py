"""Cutting a Keras model into a flat list of units that a pipeline can cut into cells.

- A list of Keras layers, or a `keras.Sequential`: each layer is a unit.
- A functional `keras.Model`: the model is cut where its graph narrows to one tensor (any layer whose output is
  the only tensor that later layers read), or, with `cut_at`, only at the named layers; an entry of `cut_at` may
  also be a list of layer names, whose outputs then cross the boundary together as a dict (a NestedMap in the
  pipeline). Each unit is the functional sub-model between two cuts, sharing the model's layers.
"""

import warnings

import keras
# A functional model's own calls of a layer are keys of its private _nodes; Keras 3 has no public way to ask which
# calls are the model's, and make_node_key is how Keras itself spells those keys.
from keras.src.ops.function import make_node_key

from lingpipe.core import errors


def _Layers(model):
  """The layers of a Sequential (its InputLayer left out)."""
  return [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]


def LayerNames(unit):
  """The names of the layers a unit runs: a piece of a functional model (a sub-model) lists its own."""
  if IsFunctional(unit):
    return [layer.name for layer in unit.layers if not isinstance(layer, keras.layers.InputLayer)]
  return [unit.name]


def IsFunctional(model):
  return isinstance(model, keras.Model) and not isinstance(model, keras.Sequential) and hasattr(
      model, '_operations') and hasattr(model, 'inputs') and model.inputs is not None


def Units(model, cut_at=None):
  """[(unit, input shape or None)]: a Keras layer per unit and, where the model knows it, the shape it takes."""
  if isinstance(model, (list, tuple)):
    if not model or not all(isinstance(layer, keras.layers.Layer) for layer in model):
      raise errors.ConfigError('lingpipe.keras.Pipeline: a list of layers must be a non-empty list of Keras '
                               'layers, got %r.' % (model,))
    if cut_at:
      raise errors.ConfigError('lingpipe.keras.Pipeline: cut_at applies to a functional model; a list of layers '
                               'is cut between any two layers.')
    units = [(layer, None) for layer in model]
    _RefuseSharedWeights(units, lambda i, j: 'entries %d and %d of the list of layers' % (i, j), None)
    return units
  if isinstance(model, keras.Sequential):
    if cut_at:
      raise errors.ConfigError('lingpipe.keras.Pipeline: cut_at applies to a functional model; a Sequential is '
                               'cut between any two layers.')
    layers = _Layers(model)
    if not layers:
      raise errors.ConfigError('lingpipe.keras.Pipeline: Sequential %r has no layers.' % model.name)
    shape = model.inputs[0].shape if model.built and getattr(model, 'inputs', None) else None
    units = []
    for layer in layers:
      units.append((layer, shape))
      # compute_output_spec, not compute_output_shape, which custom layers often leave out.
      shape = tuple(layer.compute_output_spec(keras.KerasTensor(shape)).shape) if shape is not None else None
    _RefuseSharedWeights(units, lambda i, j: 'layers %d and %d of Sequential %r' % (i, j, model.name), None)
    return units
  if IsFunctional(model):
    return _FunctionalUnits(model, cut_at)
  raise errors.ConfigError('lingpipe.keras.Pipeline takes a list of Keras layers, a keras.Sequential or a '
                           'functional keras.Model, got %s. A subclassed keras.Model has no graph to cut: list '
                           'its layers instead.' % type(model).__name__)


def _OwnNodes(model, op):
  """The calls of `op` that belong to `model`'s graph (making sub-models of a graph adds calls to its layers)."""
  return [node for i, node in enumerate(op._inbound_nodes)  # pylint: disable=protected-access
          if make_node_key(op, i) in model._nodes]  # pylint: disable=protected-access


def NarrowPoints(model):
  """Names of the layers of functional `model` after which only their one output tensor is still needed."""
  operations = [op for op in model.operations if not isinstance(op, keras.layers.InputLayer)]
  nodes = [_OwnNodes(model, op) for op in operations]
  consumers = {}  # id(tensor) -> index of the last operation reading it
  for i, op_nodes in enumerate(nodes):
    for node in op_nodes:
      for t in node.input_tensors:
        consumers[id(t)] = max(consumers.get(id(t), -1), i)
  outputs = {id(t) for t in model.outputs}
  produced = [id(t) for t in model.inputs]
  points = []
  for i, op in enumerate(operations[:-1]):
    own = [id(t) for node in nodes[i] for t in node.output_tensors]
    produced += own
    live = {t for t in produced if consumers.get(t, -1) > i or t in outputs}
    if len(nodes[i]) == 1 and len(own) == 1 and live == set(own):
      points.append(op.name)
  return points


def _Output(model, name):
  try:
    layer = model.get_layer(name)
  except ValueError as e:
    raise errors.ConfigError('lingpipe.keras.Pipeline: cut_at names layer %r, which model %r does not have.%s' % (
        name, model.name, errors.DidYouMean(name, [l.name for l in model.layers]))) from e
  nodes = _OwnNodes(model, layer)
  if len(nodes) != 1 or len(nodes[0].output_tensors) != 1:
    raise errors.ConfigError('lingpipe.keras.Pipeline: cannot cut at layer %r: it is called %d times in the model '
                             '(a shared layer) or has several outputs; cut at a layer called once with one output.'
                             % (name, len(nodes)))
  return nodes[0].output_tensors[0]


def _FunctionalUnits(model, cut_at):
  narrow = NarrowPoints(model)
  if cut_at is None:
    cut_at = narrow
  boundaries = []
  for entry in cut_at:
    if isinstance(entry, (list, tuple)):
      boundaries.append({name: _Output(model, name) for name in entry})
    else:
      boundaries.append(_Output(model, entry))
  inputs = model.inputs[0] if len(model.inputs) == 1 else {t.name: t for t in model.inputs}
  units, start = [], inputs
  for i, end in enumerate(boundaries + [model.output]):
    try:
      with warnings.catch_warnings():  # Keras asks dict keys to match tensor names; ours are the layers' names.
        warnings.filterwarnings('ignore', message='When providing `inputs` as a dict')
        unit = keras.Model(inputs=start, outputs=end, name='%s_part_%d' % (model.name, i))
    except ValueError as e:
      raise errors.ConfigError(
          'lingpipe.keras.Pipeline: model %r does not narrow to %s: later layers read other tensors too (%s). '
          'Cut where one tensor (or the dict of tensors you list) carries everything forward; the model narrows '
          'after: %s.' % (model.name, cut_at[i - 1] if i else 'its inputs', str(e).splitlines()[0],
                          ', '.join(narrow) or 'no layer')) from e
    shape = {k: t.shape for k, t in start.items()} if isinstance(start, dict) else start.shape
    units.append((unit, shape))
    start = end

  def Where(i, j):
    cuts = [c if isinstance(c, str) else '+'.join(c) for c in cut_at[i:j]]
    return 'pieces %d and %d of model %r (on both sides of the cut at %s)' % (i, j, model.name, ', '.join(cuts))

  _RefuseSharedWeights(units, Where, narrow)
  return units


def _OwnedWeights(unit):
  """{id of a weight, or of a layer not built yet: name of the layer in `unit` that holds it}; a piece of a
  functional model names its layers."""
  layers = [l for l in unit.layers if not isinstance(l, keras.layers.InputLayer)] if IsFunctional(unit) else [unit]
  owned = {id(layer): layer.name for layer in layers if not layer.built}  # Its weights come when it is built.
  owned.update({id(w): layer.name for layer in layers for w in layer.weights})
  return owned


def _RefuseSharedWeights(units, where, narrow):
  """A ConfigError when two units hold one weight (a layer called on both sides of a cut, or listed twice).

  Each unit becomes a KerasLayer that trains its own copy of its weights on its cell's device (keras_layer.py), so
  a weight held by two units would silently become two weights that train apart: refused, naming the layer.
  """
  first_unit = {}  # id(weight) -> (unit index, layer name)
  for j, (unit, _) in enumerate(units):
    for weight, name in _OwnedWeights(unit).items():
      i, first_name = first_unit.setdefault(weight, (j, name))
      if i == j:
        continue
      layer = first_name if first_name == name else '%s (as %s)' % (first_name, name)
      if narrow is None:
        fix = 'Give each entry a layer object of its own, or wrap the entries that share it in one layer.'
      elif narrow:
        fix = 'Cut where every call of it falls on one side (the model narrows after: %s).' % ', '.join(narrow)
      else:
        fix = 'No cut of this model keeps every call on one side: train it with num_splits=1.'
      raise errors.ConfigError(
          "lingpipe.keras.Pipeline: layer %r is used in %s; the pipeline trains a copy of each piece's weights on "
          "its cell's device, so the shared weights would be untied and train apart. %s" % (layer, where(i, j), fix))


def CheckEnoughUnits(model, units, num_splits):
  """A ConfigError naming why a functional model cut where it narrows gives fewer pieces than `num_splits`."""
  if not IsFunctional(model) or not isinstance(num_splits, int) or num_splits <= len(units):
    return
  narrow = NarrowPoints(model)
  shared = sorted({op.name for op in model.operations if len(_OwnNodes(model, op)) > 1 and op.weights})
  raise errors.ConfigError(
      'lingpipe.keras.Pipeline: num_splits=%d, and functional model %r cuts into %d piece(s): it narrows to one '
      'tensor after %s.%s Use num_splits=%d%s, or name cuts with cut_at.' % (
          num_splits, model.name, len(units), ', '.join(narrow) or 'no layer',
          ' A shared layer (%s) keeps every layer between its calls in one piece.' % ', '.join(shared)
          if shared else '', len(units), ' or fewer' if len(units) > 1 else ''))
