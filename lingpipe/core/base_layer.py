"""BaseLayer: a `tf.Module` built only from Params.

A layer declares its configuration in a class method `Params()`, creates its children with `CreateChild` /
`CreateChildren` and its variables with `CreateVariable`, all inside `__init__` (so every variable exists before
any `tf.function` is traced). After `__init__` the layer and its params are frozen: creating a child or a variable
later, or assigning a layer or variable as a plain attribute, raises. Variable names follow the layer path
(`mlp/fc0/w`), and so do checkpoint keys, which makes checkpoints readable and stable.

Every layer implements `FProp(inputs, ...)` and a class method `FPropMeta(params, *input_shapes)` that returns
`NestedMap(out_shapes=(...), flops=int)` without building anything; partitioning and memory planning use it.
"""

import contextlib
import threading

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.core import param_checks
from lingpipe.core import weight_init
from lingpipe.core.nested_map import NestedMap

_BUILD = threading.local()  # The stack of layers whose __init__ is running, innermost last.

DEFAULT_SEED = 1234


class AbstractVariable:
  """What CreateVariable makes under `AbstractVariables()`: a name, shape and dtype, and no memory."""

  def __init__(self, name, shape, dtype, trainable):
    self.name, self.shape, self.dtype, self.trainable = name, tf.TensorShape(shape), tf.as_dtype(dtype), trainable

  def __repr__(self):
    return 'AbstractVariable(%s, %s, %s)' % (self.name, self.shape, self.dtype.name)


@contextlib.contextmanager
def AbstractVariables():
  """Layers built inside create AbstractVariables instead of tf.Variables: a model of any size can be built and
  its parameters counted (`NumParams`) without allocating its weights. Such layers cannot run."""
  previous = getattr(_BUILD, 'abstract', False)
  _BUILD.abstract = True
  try:
    yield
  finally:
    _BUILD.abstract = previous


def IsAbstract():
  """True inside AbstractVariables()."""
  return getattr(_BUILD, 'abstract', False)


def NumParams(layer, trainable_only=True):
  """Number of parameters of a layer tree (built normally or under AbstractVariables)."""
  return sum(v.shape.num_elements() for l in layer.Walk() for v in l.vars.values()
             if v.trainable or not trainable_only)


def _BuildStack():
  if not hasattr(_BUILD, 'stack'):
    _BUILD.stack = []
  return _BUILD.stack


class _LayerMeta(type):
  """Runs the layer's __init__ inside a build scope, then freezes the layer."""

  def __call__(cls, params, *args, **kwargs):
    layer = cls.__new__(cls)
    stack = _BuildStack()
    stack.append(layer)
    try:
      layer.__init__(params, *args, **kwargs)
    finally:
      stack.pop()
    object.__setattr__(layer, '_initialized', True)
    return layer


class BaseLayer(tf.Module, metaclass=_LayerMeta):
  """Base class of all lingpipe layers. See the module docstring."""

  @classmethod
  def Params(cls):
    p = hyperparams.InstantiableParams(cls)
    p.Define('name', '', 'Name of this layer; it becomes a component of variable and checkpoint paths.')
    p.Define('dtype', tf.float32, 'dtype of variables (the master weights, as checkpoints keep them).',
             check=param_checks.FloatDtype())
    p.Define('fprop_dtype', None, 'dtype of computation and activations (e.g. bfloat16); None computes in dtype. '
             'Children inherit it unless they set their own.', check=param_checks.OrNone(param_checks.FloatDtype()))
    p.Define('params_init', weight_init.WeightInit.Xavier(1.0),
             'Default initializer of this layer\'s weights (WeightInit.*).')
    p.Define('random_seed', None, 'Seed of weight initialization and seeded randomness; None inherits the '
             'parent layer\'s (the root uses %d).' % DEFAULT_SEED, check=param_checks.OrNone(param_checks.Int()))
    return p

  def __init__(self, params):
    if not isinstance(params, hyperparams.Params) or 'cls' not in params:
      raise errors.ConfigError('%s must be built from its Params(), got %r.' % (type(self).__name__, params))
    if not isinstance(self, params.cls):
      raise errors.ConfigError('Params for %s used to build %s.' % (params.cls.__name__, type(self).__name__))
    p = params.Copy()
    if not p.name:
      raise errors.ConfigError('%s needs a name: set p.name.' % type(self).__name__)
    if not hyperparams.NAME_RE.match(p.name):
      raise errors.ConfigError('Layer name %r is invalid: it must match %s.' % (
          p.name, hyperparams.NAME_RE.pattern))
    stack = _BuildStack()
    parent = stack[-2] if len(stack) >= 2 and stack[-1] is self else None
    if p.random_seed is None:
      p.random_seed = parent.params.random_seed if parent is not None else DEFAULT_SEED
    p.Freeze()
    super().__init__(name=p.name)
    object.__setattr__(self, '_initialized', False)
    object.__setattr__(self, '_params', p)
    object.__setattr__(self, '_parent_path', parent.path if parent is not None else '')
    object.__setattr__(self, '_child_names', [])
    object.__setattr__(self, '_var_names', [])
    object.__setattr__(self, '_kept_dtype', set())  # Variables the forward reads in their own dtype.

  # -- identity ------------------------------------------------------------------------------------------------
  @property
  def params(self):
    """This layer's frozen Params."""
    return self._params

  @property
  def fprop_dtype(self):
    """The dtype this layer computes in: params.fprop_dtype, else params.dtype."""
    return self._params.fprop_dtype or self._params.dtype

  @property
  def path(self):
    """The layer's path from the root, e.g. 'mlp/fc0'."""
    return '%s/%s' % (self._parent_path, self._params.name) if self._parent_path else self._params.name

  @property
  def children(self):
    """{name: layer or list of layers}, in creation order."""
    return {name: getattr(self, name) for name in self._child_names}

  @property
  def vars(self):
    """This layer's own variables (not its children's) as a NestedMap."""
    return NestedMap({name: getattr(self, name) for name in self._var_names})

  def __repr__(self):
    return '%s(%s)' % (type(self).__name__, self.path)

  def Walk(self):
    """Yields this layer and all its descendants, depth first."""
    yield self
    for child in self.children.values():
      for c in (child if isinstance(child, (list, tuple)) else [child]):
        yield from c.Walk()

  # -- construction --------------------------------------------------------------------------------------------
  def _CheckBuilding(self, what, name):
    if self._initialized:
      raise errors.ConfigError('%s %r of layer %s must be created in __init__ (the layer is already built).' %
                               (what, name, self.path))
    if not hyperparams.NAME_RE.match(name):
      raise errors.ConfigError('%s name %r of layer %s is invalid: it must match %s.' % (
          what, name, self.path, hyperparams.NAME_RE.pattern))
    if name in self._child_names or name in self._var_names:
      raise errors.ConfigError('Layer %s already has a child or variable named %r.' % (self.path, name))

  def _BuildChild(self, name, params):
    if not isinstance(params, hyperparams.InstantiableParams):
      raise errors.ConfigError('Child %r of layer %s needs layer Params (SomeLayer.Params()), got %r.' % (
          name, self.path, type(params).__name__))
    p = params.Copy()
    p.name = name
    p.dtype = self.params.dtype  # A layer keeps one dtype all the way down (as Lingvo's CopyBaseParams).
    if p.fprop_dtype is None:
      p.fprop_dtype = self.params.fprop_dtype
    if p.random_seed is None:
      p.random_seed = self.params.random_seed
    return p.Instantiate()

  def CreateChild(self, name, params):
    """Builds a child layer from `params` (copied, its name set to `name`) and tracks it as `self.<name>`."""
    self._CheckBuilding('Child', name)
    child = self._BuildChild(name, params)
    tf.Module.__setattr__(self, name, child)
    self._child_names.append(name)
    return child

  def CreateChildren(self, name, params_list, devices=None):
    """Builds a list of children named '<name>_<i>' and tracks the list as `self.<name>`.

    `devices` (one device name per child) places each child's variables, e.g. on its pipeline cell's device.
    """
    self._CheckBuilding('Children', name)
    devices = devices or [None] * len(params_list)
    children = []
    for i, (p, device) in enumerate(zip(params_list, devices)):
      # tf.device(None) would clear an enclosing device scope, so only enter one when a device is given.
      with tf.device(device) if device else contextlib.nullcontext():
        children.append(self._BuildChild('%s_%d' % (name, i), p))
    tf.Module.__setattr__(self, name, children)
    self._child_names.append(name)
    return getattr(self, name)

  def CreateVariable(self, name, weight_params, keep_dtype=False):
    """Creates variable `self.<name>` from WeightParams; its initial value depends only on the seed and path.
    The forward reads it through `theta` in fprop_dtype, or in its own dtype when `keep_dtype` (what needs the
    range or precision: normalization parameters and statistics)."""
    self._CheckBuilding('Variable', name)
    if keep_dtype:
      self._kept_dtype.add(name)
    wp = weight_params.Copy()
    if wp.init is None:
      wp.init = self.params.params_init
    if wp.dtype is None:
      wp.dtype = self.params.dtype
    full_name = '%s/%s' % (self.path, name)
    if IsAbstract():
      var = AbstractVariable(full_name, wp.shape, wp.dtype, wp.trainable)
    else:
      value = weight_init.InitialValue(wp, weight_init.VariableSeed(self.params.random_seed, full_name))
      var = tf.Variable(value, name=full_name, trainable=wp.trainable)
    tf.Module.__setattr__(self, name, var)
    self._var_names.append(name)
    return var

  def AdoptVariable(self, name, var):
    """Tracks `var`, a tf.Variable another library made (a Keras layer's), as `self.<name>`: it is then one of this
    layer's variables for checkpoints, `trainable_variables` and VariablesAs."""
    self._CheckBuilding('Variable', name)
    if not isinstance(var, tf.Variable):
      raise errors.ConfigError('Layer %s: AdoptVariable(%r) needs a tf.Variable, got %s.' % (
          self.path, name, type(var).__name__))
    tf.Module.__setattr__(self, name, var)
    self._var_names.append(name)
    return var

  def VariableFPropDtype(self, name):
    """The dtype the forward reads this layer's variable `name` in (see CreateVariable)."""
    var = getattr(self, name)
    if name in self._kept_dtype or not var.dtype.is_floating:
      return var.dtype
    return self.fprop_dtype

  @property
  def theta(self):
    """This layer's own variables as its forward computes with them: a NestedMap of each variable cast to its
    VariableFPropDtype. Inside a pipeline the cell's values are already cast once per step, and these casts are
    no-ops."""
    return NestedMap({name: _Cast(getattr(self, name), self.VariableFPropDtype(name))
                      for name in self._var_names})

  def ToFProp(self, x):
    """`x` (a tensor or nest) with its floating-point leaves cast to fprop_dtype."""
    return ToDtype(x, self.fprop_dtype)

  def MovingStatsTargets(self):
    """What this layer's forward reports batch-norm moments for, to a context.BatchNormStats collector: objects
    with a `path`, `moving_mean` and `UpdateMovingStats(mean, variance)`. A batch norm layer is its own target;
    layers wrapping another library's batch norm give theirs."""
    return [self] if hasattr(self, 'UpdateMovingStats') else []

  def __setattr__(self, name, value):
    if not name.startswith('_') and _HoldsLayerOrVariable(value):
      raise errors.ConfigError('Layer %s: assign children with CreateChild/CreateChildren and variables with '
                               'CreateVariable, not as attribute %r.' % (self.path, name))
    if getattr(self, '_initialized', False) and not name.startswith('_'):
      raise errors.ConfigError('Layer %s is built; attribute %r cannot be set after __init__.' % (
          self.path, name))
    super().__setattr__(name, value)

  # -- forward -------------------------------------------------------------------------------------------------
  def FProp(self, *args, **kwargs):
    raise NotImplementedError('%s does not implement FProp.' % type(self).__name__)

  def __call__(self, *args, **kwargs):
    return self.FProp(*args, **kwargs)

  @classmethod
  def FPropMeta(cls, params, *input_shapes):
    """Returns NestedMap(out_shapes=tuple of TensorShape, flops=int) for inputs of `input_shapes`."""
    raise NotImplementedError('%s does not implement FPropMeta.' % cls.__name__)

  def CheckInputShape(self, x, rank=None, last_dim=None, arg='inputs', min_rank=None):
    """Raises ShapeError naming this layer when `x` has the wrong rank or last dimension."""
    shape = x.shape
    bad_rank = (rank is not None and shape.rank != rank) or (
        min_rank is not None and shape.rank is not None and shape.rank < min_rank)
    bad_depth = (last_dim is not None and shape.rank and shape[-1] is not None and shape[-1] != last_dim)
    if bad_rank or bad_depth:
      want = []
      if rank is not None:
        want.append('rank %d' % rank)
      if min_rank is not None:
        want.append('rank >= %d' % min_rank)
      if last_dim is not None:
        want.append('last dimension %d' % last_dim)
      raise errors.ShapeError('Layer %s (%s): %s must have %s; got shape %s.' % (
          self.path, type(self).__name__, arg, ' and '.join(want), shape.as_list() if shape.rank is not None
          else shape))


@contextlib.contextmanager
def VariablesAs(layers, values):
  """Inside the block, the variables of `layers` (and their descendants) found in `values` ({variable.ref():
  tensor}, or {AbstractVariable: tensor} for a layer built abstractly) read as those tensors: Lingvo's theta, for
  code that traces a layer's forward as a function of its parameters. The pipeline uses it to pass each cell's
  parameter values, read once per step, to its traced functions. Only for tracing: `trainable_variables` of a
  layer inside the block leaves the replaced variables out."""
  swapped = []
  try:
    for top in layers:
      for layer in top.Walk():
        for name in layer._var_names:  # pylint: disable=protected-access
          var = getattr(layer, name)
          key = var if isinstance(var, AbstractVariable) else var.ref()
          if key in values:
            # object.__setattr__: a temporary value, not a new tracked attribute (tf.Module's tracking is untouched).
            object.__setattr__(layer, name, values[key])
            swapped.append((layer, name, var))
    yield
  finally:
    for layer, name, var in reversed(swapped):
      object.__setattr__(layer, name, var)


def _Cast(value, dtype):
  return value if value.dtype == dtype else tf.cast(value, dtype)


def ToDtype(x, dtype):
  """`x` (a tensor or nest) with its floating-point leaves cast to `dtype`; other leaves unchanged."""
  return tf.nest.map_structure(
      lambda t: _Cast(t, dtype) if hasattr(t, 'dtype') and t.dtype.is_floating else t, x)


def _HoldsLayerOrVariable(value):
  if isinstance(value, (BaseLayer, tf.Variable)):
    return True
  if isinstance(value, (list, tuple)):
    return any(_HoldsLayerOrVariable(v) for v in value)
  if isinstance(value, dict):
    return any(_HoldsLayerOrVariable(v) for v in value.values())
  return False


def Meta(out_shapes, flops):
  """The value FPropMeta returns: output shapes and forward flops. `out_shapes` is one shape (a TensorShape or a
  list of dims) or a tuple of shapes, one per output."""
  if not isinstance(out_shapes, tuple):
    out_shapes = (out_shapes,)
  return NestedMap(out_shapes=tuple(_Shape(s) for s in out_shapes), flops=int(flops))


def _Shape(shape):
  """A TensorShape, or a NestedMap of them for layers whose outputs are NestedMaps."""
  if isinstance(shape, dict):
    return NestedMap({k: _Shape(v) for k, v in shape.items()})
  return tf.TensorShape(shape)
