"""KerasLayer: one Keras layer (or a piece of a functional model) as a lingpipe layer.

A pipeline cell traces its layers as functions of their weights (base_layer.VariablesAs swaps each variable for
the value read once per step). Keras 3 layers have that form built in: `layer.stateless_call(trainable values,
non-trainable values, inputs)` returns the outputs and the non-trainable values the call would have assigned. So
this layer adopts the Keras layer's variables as its own, and its FProp is one stateless call: the executor runs
Keras layers exactly as it runs lingpipe's, with every schedule and remat policy.

What a Keras forward assigns, lingpipe must do its own way, because a pipeline runs each cell's forward once per
micro-batch (and again when it re-computes):
- BatchNormalization's moving statistics: each micro-batch is normalized by its own moments, as in GPipe, and the
  averages move once per step by the whole mini-batch's moments (moments.Moments, merged by the pipeline), with
  Keras's own rule `moving = moving * momentum + batch * (1 - momentum)`. The micro-batch's mean and variance are
  read back from the stateless call with zeros fed as the moving statistics (then the returned value is
  batch * (1 - momentum), divided back exactly up to rounding): no second pass over the activations.
- Random seeds (Dropout, GaussianNoise, ...; Keras's SeedGenerator state): each call gets a seed drawn from the
  generator's own seed, the step seed, the micro-batch and the replica (context.CurrentStepSeed), so the
  re-computation of a forward draws the masks the forward drew, and every step and micro-batch draws new ones.
- Any other non-trainable variable a forward assigns: an error, naming it (its updates could not be merged over
  micro-batches).
- Mixed precision (a `mixed_bfloat16` or `mixed_float16` dtype policy): Keras's `__call__` casts a layer's inputs
  to its compute dtype and its variables as it reads them, and `stateless_call` does neither, so FProp does both
  (ComputeScope): the layer computes, and hands its outputs on, in its compute dtype.

A built Keras layer is copied (from its config, with its weights' values) under the cell's device scope, so its
variables live on the cell's device and the model it came from is left as it was; an unbuilt one is built there.
"""

import contextlib
import warnings
import zlib

import keras
# AutocastScope, what Keras's own __call__ opens (ComputeScope), has no public name in Keras 3.
from keras.src.backend import AutocastScope
import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import moments
from lingpipe.core.nested_map import NestedMap
from lingpipe.keras import builder


class KerasRef:
  """A Keras object held in Params by reference: Params deep-copy their values, and a layer must not be copied."""

  def __init__(self, obj):
    self.obj = obj

  def __deepcopy__(self, memo):
    return self

  def __repr__(self):
    return 'KerasRef(%s)' % getattr(self.obj, 'name', type(self.obj).__name__)


def ConvertInputs(layer, inputs):
  """`inputs` as Keras's __call__ gives them to `layer.call`: floating-point ones cast to its input dtype when it
  autocasts (a functional model leaves that to its own layers)."""
  if not getattr(layer, '_convert_input_args', True):
    return inputs
  return tf.nest.map_structure(
      lambda x: layer.dtype_policy.convert_input(x, layer.autocast, layer.input_dtype)
      if isinstance(x, tf.Tensor) else x, inputs)


def ComputeScope(layer):
  """The autocast scope Keras's __call__ opens for `layer`: its variables read in its compute dtype when that
  differs from theirs (a mixed precision policy); else no scope."""
  if (layer.autocast and keras.backend.is_float_dtype(layer.compute_dtype) and
      layer.compute_dtype != layer.variable_dtype):
    return AutocastScope(layer.compute_dtype)
  return contextlib.nullcontext()


def CurrentDevice():
  """The device the enclosing tf.device scope places new tensors on (eager)."""
  return tf.zeros([]).device


def ToKeras(value):
  """A NestedMap as the plain dict a functional Keras model takes; anything else unchanged."""
  if isinstance(value, NestedMap):
    return {k: ToKeras(v) for k, v in value.items()}
  return value


def ToLingpipe(value):
  """Keras outputs as what lingpipe passes between cells: a dict becomes a NestedMap."""
  if isinstance(value, dict):
    return NestedMap({k: ToLingpipe(v) for k, v in value.items()})
  if isinstance(value, (list, tuple)):
    raise errors.ConfigError('A Keras layer in a pipeline returned a %s of %d tensors; a cell boundary carries one '
                             'tensor or a dict of tensors. Return a dict, or cut the model elsewhere.' % (
                                 type(value).__name__, len(value)))
  return value


def _Inner(layer):
  return list(layer._flatten_layers(include_self=False))  # pylint: disable=protected-access


def _LeafLayers(layer):
  """The Keras layers inside `layer` (itself when it has none)."""
  return [leaf for leaf in _Inner(layer) if not _Inner(leaf)] or [layer]


class _KerasMovingStats:
  """A Keras BatchNormalization's moving statistics as the target of a lingpipe BatchNormStats collector."""

  def __init__(self, path, keras_bn):
    self.path = path
    self.momentum = keras_bn.momentum
    self.moving_mean = keras_bn.moving_mean.value
    self.moving_variance = keras_bn.moving_variance.value

  def UpdateMovingStats(self, mean, variance):
    """Keras's rule: moving = moving * momentum + batch * (1 - momentum)."""
    momentum = tf.cast(self.momentum, mean.dtype)
    return tf.group(self.moving_mean.assign(self.moving_mean * momentum + mean * (1.0 - momentum)),
                    self.moving_variance.assign(self.moving_variance * momentum + variance * (1.0 - momentum)))


class KerasLayer(base_layer.BaseLayer):
  """Runs a Keras layer (a Layer, or a keras.Model standing for a piece of a functional model) statelessly."""

  SHARES_TRACE = False  # Its Keras layer reads its own variables: the pipeline runs it as it is (layer_functions).

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('keras_layer', None, 'The Keras layer, as KerasRef(layer) (held by reference, never copied); or '
             'None and `builder`.')
    p.Define('builder', '', "Instead of keras_layer: the dotted name of a function returning a Keras model, cut "
             'as lingpipe.keras cuts models (builder.py); this layer runs its piece `unit`.')
    p.Define('builder_kwargs', {}, 'Keyword arguments of `builder` (Python literals).')
    p.Define('cut_at', None, "Where `builder`'s model is cut (cut.py): None cuts wherever it narrows.")
    p.Define('unit', None, "Which piece of `builder`'s model this layer runs; None: all of them, one KerasLayer "
             'each (a PipeliningLayer expands this entry of its layers when it builds the model).')
    p.Define('input_shape', None, 'Shape of one input batch (a list, or a dict of lists), batch dimension first '
             '(None allowed): builds an unbuilt layer, and sizes FPropMeta.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    layer = _GivenLayer(p, self.path)
    if not layer.built:
      if p.input_shape is None:
        raise errors.ConfigError('Layer %s: Keras layer %r is not built and no input_shape was given to build it.'
                                 % (self.path, layer.name))
      layer.build(_BuildShape(p.input_shape))  # Under the cell's tf.device: its variables live there.
    else:  # The pipeline trains a copy on the cell's device: the given model is left as it was.
      layer = _CopyHere(layer, self.path)
    object.__setattr__(self, '_keras', layer)
    # The Keras variables' tf.Variables, adopted as this layer's: the pipeline reads and swaps them like its own.
    trainable, state = layer.trainable_variables, layer.non_trainable_variables
    object.__setattr__(self, '_trainable_names', ['w_%d' % i for i in range(len(trainable))])
    object.__setattr__(self, '_state_names', ['s_%d' % i for i in range(len(state))])
    for name, v in zip(self._trainable_names + self._state_names, trainable + state):
      self.AdoptVariable(name, v.value)
    self._FindState(layer, state)

  def _FindState(self, layer, state):
    """Which non-trainable variables are batch-norm statistics (index pairs) and which are random seeds."""
    position = {id(v): i for i, v in enumerate(state)}
    batch_norms, seeds = [], {}
    for leaf in _LeafLayers(layer):
      if type(leaf).__name__ == 'BatchNormalization' and leaf.trainable and leaf.built:
        if getattr(leaf, 'renorm', False):
          raise errors.ConfigError('Layer %s: BatchNormalization %r uses renorm, which lingpipe cannot split into '
                                   'micro-batches; set renorm=False.' % (self.path, leaf.name))
        batch_norms.append((position[id(leaf.moving_mean)], position[id(leaf.moving_variance)],
                            _KerasMovingStats('%s/%s' % (self.path, leaf.path), leaf)))
    for i, v in enumerate(state):
      if v.path.endswith('seed_generator_state'):
        # By position, not Keras's (uniquified) variable path: the same model pipelined twice draws the same masks.
        seeds[i] = zlib.crc32(('%s/%d' % (self.path, i)).encode('utf-8')) & 0x7FFFFFFF
    object.__setattr__(self, '_batch_norms', batch_norms)
    object.__setattr__(self, '_seeds', seeds)

  @property
  def keras_layer(self):
    return self._keras

  def MovingStatsTargets(self):
    return [stats for _, _, stats in self._batch_norms]

  def VariableFPropDtype(self, name):
    """Its own dtype: Keras casts the variables its policy says to as the layer reads them (ComputeScope)."""
    return getattr(self, name).dtype

  def FProp(self, inputs):
    training = bool(context.IsTraining())
    trainable = [getattr(self, name) for name in self._trainable_names]
    state = [getattr(self, name) for name in self._state_names]
    feed = list(state)
    if training:
      for mean_i, variance_i, _ in self._batch_norms:
        feed[mean_i] = tf.zeros_like(state[mean_i])
        feed[variance_i] = tf.zeros_like(state[variance_i])
      for i, salt in self._seeds.items():
        feed[i] = _DrawSeed(state[i], salt)
    # Only layers whose call takes `training` get it (Keras's own __call__ makes the same check).
    kwargs = {'training': training} if getattr(self._keras, '_call_has_training_arg', True) else {}
    with ComputeScope(self._keras):
      outputs, new_state = self._keras.stateless_call(trainable, feed, ConvertInputs(self._keras, ToKeras(inputs)),
                                                      **kwargs)
    if training:
      self._CheckNoOtherState(feed, new_state)
      self._ReportMoments(inputs, new_state)
    return ToLingpipe(outputs)

  def _CheckNoOtherState(self, feed, new_state):
    handled = {i for pair in self._batch_norms for i in pair[:2]} | set(self._seeds)
    for i, (before, after) in enumerate(zip(feed, new_state)):
      if i not in handled and after is not before:
        raise errors.ConfigError(
            'Layer %s: Keras variable %r is assigned by the forward pass; lingpipe runs a forward once per '
            'micro-batch (and again when it re-computes), so it cannot merge such updates. Only '
            'BatchNormalization statistics and random seeds are handled; make the variable trainable, or keep '
            'the layer out of the pipeline.' % (self.path, self._keras.non_trainable_variables[i].path))

  def _ReportMoments(self, inputs, new_state):
    if not self._batch_norms:
      return
    rows = tf.shape(tf.nest.flatten(inputs)[0])[0]  # Equal-sized micro-batches: rows weigh each part right.
    collector = context.CurrentBatchNormStats()
    for mean_i, variance_i, stats in self._batch_norms:
      scale = 1.0 - stats.momentum
      mean, variance = new_state[mean_i] / scale, new_state[variance_i] / scale
      if collector is None:  # Not in a pipeline or a task: the averages move now, as Keras would move them.
        stats.UpdateMovingStats(mean, variance)
      else:
        collector.Add(stats, moments.Moments.Of(mean, variance, rows))

  @classmethod
  def ExpandUnits(cls, params):
    """[params]; or, for all pieces of a builder's model (unit None), one copy per piece."""
    if not (params.keras_layer is None and params.builder and params.unit is None):
      return [params]
    units = builder.Units(params.builder, params.builder_kwargs, params.cut_at, params.fprop_dtype)
    return [params.Copy().Set(name='%s_%d' % (params.name, i), unit=i,
                              input_shape=params.input_shape if i == 0 else None) for i in range(len(units))]

  @classmethod
  def FPropMeta(cls, params, *input_shapes):
    layer = _GivenLayer(params, params.name)
    shape = input_shapes[0] if input_shapes else params.input_shape
    spec = layer.compute_output_spec(KerasSpec(shape))
    out = _Shapes(spec)
    return base_layer.Meta(out, _Flops(layer, shape, out))


def _GivenLayer(p, path):
  """The Keras layer KerasLayer params name: p.keras_layer's, or piece p.unit of p.builder's model."""
  if p.keras_layer is None and p.builder:
    units = builder.Units(p.builder, p.builder_kwargs, p.cut_at, p.fprop_dtype)
    if p.unit is None:
      raise errors.ConfigError('Layer %s: unit is None (every piece of %r): put the layer in a PipeliningLayer\'s '
                               'layers, which runs one KerasLayer per piece, or set unit.' % (path, p.builder))
    if not 0 <= p.unit < len(units):
      raise errors.ConfigError('Layer %s: unit %d of Keras model builder %r, whose model has units 0..%d.' % (
          path, p.unit, p.builder, len(units) - 1))
    return units[p.unit][0]
  if isinstance(p.keras_layer, KerasRef):
    return p.keras_layer.obj
  raise errors.ConfigError('Layer %s: keras_layer must be KerasRef(<a Keras layer>), or builder a Keras model '
                           'builder; got keras_layer=%r, builder=%r.' % (path, p.keras_layer, p.builder))


def _CopyHere(layer, path):
  """A copy of built `layer` with its variables on the current device and its weights' values."""
  try:
    with warnings.catch_warnings():  # Dict inputs of a cut functional model are keyed by layer, not tensor, names.
      warnings.filterwarnings('ignore', message='When providing `inputs` as a dict')
      copy = keras.models.clone_model(layer) if isinstance(layer, keras.Model) else None
    if copy is None:
      copy = type(layer).from_config(layer.get_config())
      copy.build_from_config(layer.get_build_config())
  except (NotImplementedError, TypeError, ValueError) as e:
    raise errors.ConfigError(
        "Layer %s: Keras layer %r is built, so the pipeline trains a copy of it on its cell's device %s, and it "
        'could not rebuild it from its config (%s). Give the pipeline unbuilt layers (it builds each on its '
        'device), or give the layer a get_config().' % (path, layer.name, CurrentDevice(), e)) from e
  copy.set_weights(layer.get_weights())
  return copy


def _DrawSeed(state, salt):
  """A SeedGenerator state for this call: from its own seed, the layer, and context.CurrentStepSeed()."""
  own = tf.cast(state[0], tf.int64) + salt
  drawn = tf.random.stateless_uniform([2], seed=tf.stack([own, context.CurrentStepSeed()]), minval=0,
                                      maxval=2**31 - 1, dtype=tf.int64)
  return tf.cast(drawn, state.dtype)


def _BuildShape(shape):
  if isinstance(shape, dict):
    return {k: tuple(v) for k, v in shape.items()}
  return tuple(tf.TensorShape(shape).as_list())


def KerasSpec(shape):
  """Symbolic Keras inputs of `shape` (a shape, or a dict of them), for compute_output_spec."""
  if isinstance(shape, dict):
    return {k: KerasSpec(v) for k, v in shape.items()}
  return keras.KerasTensor(tuple(tf.TensorShape(shape).as_list()))


def _Shapes(spec):
  if isinstance(spec, dict):
    return NestedMap({k: _Shapes(v) for k, v in spec.items()})
  return tf.TensorShape(spec.shape)


def _Flops(layer, input_shape, output_shape):
  """Forward flops, estimated for balance='flops': 2 x kernel size per output position of each inner layer with a
  kernel (Dense, Conv, attention projections), plus one per output element."""
  rows = _FirstShape(input_shape)[0] or 1
  out = _FirstShape(output_shape)
  flops = rows * _Prod(out[1:])
  for leaf in _LeafLayers(layer):
    kernel = getattr(leaf, 'kernel', None)
    if kernel is None:
      continue
    try:
      leaf_out = list(leaf.output.shape)
    except (AttributeError, ValueError):  # Not part of a functional graph: the unit's output stands in.
      leaf_out = out
    flops += 2 * _Prod(kernel.shape) * _Prod(leaf_out[1:-1]) * rows
  return flops


def _FirstShape(shape):
  """The first leaf of a shape or dict of shapes, as a list."""
  if isinstance(shape, dict):
    return _FirstShape(shape[sorted(shape)[0]])
  return list(tf.TensorShape(shape).as_list())


def _Prod(dims):
  total = 1
  for d in dims:
    total *= d or 1
  return total
