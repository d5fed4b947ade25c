"""lingpipe.keras.Pipeline: a Keras model run as a GPipe pipeline, that compiles, fits, evaluates and predicts.

    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(1024, 'relu'), ..., keras.layers.Dense(10)])
    pipelined = lingpipe.keras.Pipeline(model, num_splits=2, num_micro_batches=4, remat='always')
    pipelined.compile(optimizer='sgd', loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    pipelined.fit(x, y, batch_size=256, epochs=3)

The layers (a list, a Sequential, or a functional model cut where its graph narrows, cut.py) become the units of
one PipeliningLayer: each wrapped as a KerasLayer (keras_layer.py) that runs it statelessly with its weights as
values, so lingpipe's one executor runs them, with every schedule and remat policy, cell k's variables on device
k. The result is a keras.Model: Keras's fit loop, optimizers, losses, metrics and callbacks work unchanged, and
its gradients are those of the plain model (the pipeline's custom gradient).
"""

import keras
import numpy as np
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.gpipe import pipelining_layer
from lingpipe.keras import auto_choice
from lingpipe.keras import cut
from lingpipe.keras import keras_layer
from lingpipe.keras import pipeline_step
from lingpipe.keras import placement


class _Held:
  """Holds the lingpipe layer out of Keras's attribute tracking (its variables are the Keras layers' own)."""

  def __init__(self, value):
    self.value = value


@keras.saving.register_keras_serializable(package='lingpipe')
class Pipeline(pipeline_step.TrainStep, keras.Model):
  """See the module docstring. Arguments after `model` are PipeliningLayer's params of the same names, and:

  cut_at: for a functional model, the layers to cut after (cut.py); default: wherever the graph narrows.
  input_shape: the shape of a batch, for layers that are not built yet.
  batch_size: the largest batch; batches whose size Keras leaves open when it traces (after a smaller last batch,
    or from a dataset batched without drop_remainder) are padded to it. Default: the first static batch size.
  num_replicas: R data-parallel replicas of the K-device pipeline, each fed 1/R of every batch, on R x K devices:
    `devices` as R lists of K (local or a cluster's), or by default the first R x K local devices, replica by
    replica. The gradients are those of the whole batch, as with R=1.
  input_names: the names of a model's several inputs, in the order a list of inputs gives them (default: a
    functional model's own; set for a list of units whose first takes a dict).
  num_splits, num_micro_batches, remat, schedule, balance: each may be 'auto': chosen at the first fit (or
    evaluate, predict, eager call) from its batch and the dtype policy, as lingpipe-train --pipeline=auto chooses
    (auto_choice.py); it prints the choice, `summary()` shows it, and get_config() saves it.
  device_memory: with 'auto', the memory of one device (bytes, or text such as '2GiB') the choice must fit.
  balance: how units are placed in cells (PipeliningLayer's balance). Default: 'flops' (each unit's estimated
    forward flops) where the input shape is known, else 'uniform' (unit counts). A Keras model often starts with
    weightless layers (Rescaling, Flatten) that counting would give a cell of their own.
  """

  def __init__(self, model, num_splits=1, num_micro_batches=1, remat='always', schedule='gpipe', virtual_stages=1,
               balance=None, devices=None, cut_at=None, input_shape=None, batch_size=None, num_replicas=1,
               name=None, input_names=None, device_memory=None, **kwargs):
    placement.RefuseStrategyScope('build')
    super().__init__(name=name or 'pipeline', **kwargs)
    given_devices = devices  # Saved as given (get_config).
    # compile() scales the loss of a mixed_float16 model (or list of layers), as Keras compiles such a model.
    self._mixed_float16 = any(getattr(getattr(m, 'dtype_policy', None), 'name', '') == 'mixed_float16'
                              for m in (model if isinstance(model, (list, tuple)) else [model]))
    # A functional model of several inputs takes them as a list in this order, as Keras does (or as a dict).
    if cut.IsFunctional(model) and len(model.inputs) > 1:
      input_names = [t.name for t in model.inputs]
    self._input_names = input_names
    units = cut.Units(model, cut_at)
    if cut_at is None:
      cut.CheckEnoughUnits(model, units, num_splits)
    if input_shape is not None and units[0][1] is None:  # The model's own input shape wins.
      units[0] = (units[0][0], input_shape)
    shapes = _Shapes(units)  # Each unit's input shape, and the last one's output shape.
    if balance is None:  # Flops need every shape; a layer Keras cannot infer shapes for is built by its first call.
      balance = 'flops' if all(shape is not None for shape in shapes) else 'uniform'
    unit_params = [keras_layer.KerasLayer.Params().Set(keras_layer=keras_layer.KerasRef(unit),
                                                       input_shape=_ParamsShape(shape) if shape is not None else None)
                   for (unit, _), shape in zip(units, shapes[:-1])]
    chosen = dict(num_splits=num_splits, num_micro_batches=num_micro_batches, remat=remat, schedule=schedule,
                  balance=balance)
    self._choice = None  # The report of what was chosen for fields given as 'auto' (auto_choice.py).
    # Training calls so far: the step seed of dropout. Not a Keras weight, so that get_weights() lists the units'
    # weights in the given model's order (plain.set_weights(pipelined.get_weights()) works).
    self._seed_step = _Held(tf.Variable(0, dtype=tf.int64, trainable=False, name='seed_step'))
    self._eager_forward = _Held(None)
    self._pipeline = _Held(None)
    self._batch_size = batch_size  # Set by the first batch of static size when not given.
    self._config = dict(chosen, virtual_stages=virtual_stages, devices=None, batch_size=batch_size,
                        num_replicas=num_replicas, input_names=self._input_names,
                        input_shape=_ParamsShape(shapes[0]) if shapes[0] is not None else None)
    # Fields given as 'auto' are chosen at the first fit, evaluate, predict or call, from its batch
    # (ChooseAt); until then the units are the given layers.
    self._pending = None
    if any(value == auto_choice.AUTO for value in chosen.values()):
      if num_replicas != 1 or devices:
        raise errors.ConfigError("lingpipe.keras.Pipeline: 'auto' chooses among this process's local devices for one "
                                 'replica; set the fields to use devices= or num_replicas.')
      # The given layers stay out of Keras's tracking until then: the pipeline's units, copies on their devices,
      # are the model's weights.
      self._pending = _Held(dict(unit_params=unit_params, given=chosen, device_memory=device_memory,
                                 units=[unit for unit, _ in units]))
      self.built = False
      return
    self._Build(unit_params, dict(chosen, virtual_stages=virtual_stages), devices, given_devices)

  def _Build(self, unit_params, fields, devices=None, given_devices=None):
    """Makes the PipeliningLayer of `unit_params` with `fields` (the five, and virtual_stages)."""
    devices = placement.Mesh(devices, self._config['num_replicas'], fields['num_splits'])
    self._config.update(dict(fields, devices=devices if given_devices else None))
    params = pipelining_layer.PipeliningLayer.Params().Set(
        name=self.name, devices=devices, input_shapes=self._config['input_shape'], layers=unit_params, **fields)
    self._pipeline.value = params.Instantiate()
    self._has_batch_norm = any(layer.MovingStatsTargets() for layer in self.pipeline.Walk())
    # Tracked by Keras: the units (copies on their devices where the given ones lived elsewhere) and their weights.
    self.units = [unit.keras_layer for unit in self.pipeline.units]
    # A pipeline of built layers of known input shape is built, as the model it came from (Keras callbacks such as
    # BackupAndRestore need a built model before fit).
    self.built = self._config['input_shape'] is not None and all(unit.built for unit in self.units)

  def ChooseAt(self, x, batch_size=None):
    """Chooses the fields given as 'auto' from a batch of `x` (arrays or tensors: `batch_size` rows of them, all
    by default; a dataset: its first batch) in the policy's compute dtype, builds the pipeline and says what it
    chose (summary() shows it too). Nothing to do once chosen."""
    if self._pending is None:
      return
    if isinstance(x, tf.data.Dataset):
      x, batch_size = keras.utils.unpack_x_y_sample_weight(next(iter(x)))[0], None
    x = keras_layer.ToLingpipe(pipeline_step.Tensors(self._NamedInputs(x)))
    rows = tf.nest.flatten(x)[0].shape[0]
    rows = min(rows, batch_size) if rows is not None and batch_size else rows
    shapes = tf.nest.map_structure(lambda t: [rows] + list(t.shape[1:]), x)
    dtypes = tf.nest.map_structure(lambda t: t.dtype.name, x)
    integers = ({k: v for k, v in dtypes.items() if not tf.as_dtype(v).is_floating} if isinstance(dtypes, dict)
                else None if tf.as_dtype(dtypes).is_floating else dtypes)
    pending = self._pending.value
    fields, self._choice = auto_choice.Choose(
        pending['unit_params'], dict(shapes) if isinstance(shapes, dict) else shapes, rows, pending['given'],
        pending['device_memory'], fprop_dtype=keras.config.dtype_policy().compute_dtype, input_dtypes=integers)
    print('\n'.join(self._choice), flush=True)
    self._pending = None
    self._Build(pending['unit_params'], fields)
    if getattr(self, 'optimizer', None) is not None:
      self._BuildOptimizerOnCellDevices()

  def _Units(self):
    """The Keras layers the pipeline runs (the given ones until 'auto' fields are chosen)."""
    return self.units if self._pending is None else self._pending.value['units']

  @property
  def pipeline(self):
    """The PipeliningLayer that runs the units."""
    if self._pipeline.value is None:
      raise errors.ConfigError(
          "lingpipe.keras.Pipeline %r: its fields given as 'auto' are chosen from the first batch of fit, evaluate, "
          'predict or an eager call (or ChooseAt(x)); none has run yet.' % self.name)
    return self._pipeline.value

  def cells(self):
    """Per cell: (device, [names of its Keras layers]); a piece of a cut functional model lists its layers."""
    p = self.pipeline
    return [(p.devices[k], [name for layer in p.CellLayers(k) for name in cut.LayerNames(layer.keras_layer)])
            for k in range(p.num_cells)]

  def summary(self, *args, print_fn=None, **kwargs):
    """Keras's summary of the units, then each cell's device and layers (`cells()`)."""
    super().summary(*args, print_fn=print_fn, **kwargs)
    print_fn = print_fn or print
    if self._pending is not None:
      print_fn(" Pipeline: the fields given as 'auto' are chosen at the first fit, evaluate or predict.")
      return
    p = self.pipeline
    print_fn(' Pipeline: %d cells on %d devices%s, %d micro-batches, remat %s, schedule %s' % (
        p.num_cells, p.num_devices, ' x %d replicas' % p.num_replicas if p.num_replicas > 1 else '',
        p.params.num_micro_batches, p.params.remat, p.params.schedule))
    for k, (device, names) in enumerate(self.cells()):
      print_fn('   cell %d on %s: %s' % (k, device, ', '.join(names)))
    for line in self._choice or []:
      print_fn('   ' + line)

  def get_config(self):
    """The units (a list of Keras layers: a functional model's parts are sub-models) and the pipeline's
    arguments, so keras.saving.load_model rebuilds the pipeline and Keras loads the weights into it."""
    return dict(self._config, name=self.name,
                model=[keras.saving.serialize_keras_object(unit) for unit in self._Units()])

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    units = [keras.saving.deserialize_keras_object(unit) for unit in config.pop('model')]
    return cls(units, **config)

  def compile_from_config(self, config):
    """Keras's, which skips models that override compile (ours only refuses jit_compile=True)."""
    self.compile(**keras.saving.deserialize_keras_object(config))  # load_model then restores the optimizer's state.

  def save_own_variables(self, store):
    super().save_own_variables(store)
    store['seed_step'] = self._seed_step.value.numpy()  # A loaded model goes on with new dropout masks.

  def load_own_variables(self, store):
    if 'seed_step' in store.keys():
      self._seed_step.value.assign(np.asarray(store['seed_step']))
    super().load_own_variables({key: store[key] for key in store.keys() if key != 'seed_step'})

  def export(self, filepath, format='tf_saved_model', verbose=None,  # pylint: disable=redefined-builtin
             input_signature=None, **kwargs):
    """Keras's export, tracing the inference graph as lingpipe's exporter does (context.Exporting): the units one
    after another, no micro-batches, so the SavedModel serves any batch size on one device, without lingpipe. It
    is traced for the input shape the pipeline was built for, so a pipeline never called (just loaded) exports."""
    shape = self._config['input_shape']
    if input_signature is None and shape is not None:  # Keras infers one only for models it built by a call.
      try:  # The given model's Input; a layer loaded from its config has none (then Keras's default float type).
        dtype = tf.nest.flatten(self.units[0].input)[0].dtype
      except (AttributeError, ValueError):
        dtype = keras.backend.floatx()
      spec = lambda s: tf.TensorSpec([None] + list(s[1:]), dtype)
      input_signature = [{k: spec(v) for k, v in shape.items()} if isinstance(shape, dict) else spec(shape)]
    with context.Exporting():
      return super().export(filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs)

  def call(self, inputs, training=False):
    training = bool(training)
    if self._pending is not None and tf.executing_eagerly():
      self.ChooseAt(inputs)
    inputs = keras_layer.ToLingpipe(pipeline_step.Tensors(self._NamedInputs(inputs)))
    self._CheckInputShape(inputs)
    rows = tf.nest.flatten(inputs)[0].shape[0]
    if rows is not None and self._batch_size is None:
      self._batch_size = rows
    if training:  # Training does not pad: the batch must split into equal micro-batches.
      self.CheckBatch(rows)
    real_rows = None
    # Micro-batching needs a static batch: pad to the batch size, drop the pad rows after (export does not split).
    if rows is None and not context.IsExporting():
      inputs, real_rows = self._PadToBatchSize(inputs, training)
    seed_step = self._seed_step.value
    seed = tf.convert_to_tensor(seed_step)
    if tf.executing_eagerly():
      # The cells' traced functions would capture an eager step seed as a constant (the same masks every step);
      # called from a function, they take it as an input, as in fit.
      if self._eager_forward.value is None:
        self._eager_forward.value = tf.function(self._Forward, autograph=False)
      outputs = self._eager_forward.value(inputs, seed, training)
    else:
      outputs = self._Forward(inputs, seed, training)
    if training:  # Each training step draws new dropout masks (its re-computations draw the same ones).
      seed_step.assign_add(1)
    if real_rows is not None:
      outputs = tf.nest.map_structure(lambda t: t[:real_rows], outputs)
    return keras_layer.ToKeras(outputs)

  def _NamedInputs(self, inputs):
    """A list or tuple of inputs as the dict the first cell takes, for a model of several inputs (Keras's order);
    anything else as it is. A count that does not match is one line."""
    if not isinstance(inputs, (list, tuple)):
      return inputs
    names = self._input_names
    if names and len(inputs) == len(names):
      return dict(zip(names, inputs))
    raise errors.ConfigError(
        'lingpipe.keras.Pipeline %r: the model takes %s, and got a %s of %d. Feed %s.' % (
            self.name, '%d inputs (%s)' % (len(names), ', '.join(names)) if names else 'one input tensor',
            type(inputs).__name__, len(inputs),
            'a list in that order or a dict by those names' if names else 'one array or tensor'))

  def CheckBatch(self, rows, where='a batch'):
    """A ConfigError unless `rows` (a static batch size) splits into equal micro-batches on every replica."""
    m, r = self.pipeline.params.num_micro_batches, self.pipeline.num_replicas
    if rows is None or rows % (m * r) == 0:
      return
    multiples = [k * m * r for k in (rows // (m * r), rows // (m * r) + 1) if k]
    counts = [d for d in range(1, rows // r + 1) if rows % r == 0 and (rows // r) % d == 0]
    raise errors.ConfigError(
        'lingpipe.keras.Pipeline %r: %s of %d rows does not split into num_micro_batches=%d equal micro-batches%s. '
        'Use a batch size that is a multiple of %d (e.g. %s)%s.' % (
            self.name, where, rows, m, ' on each of num_replicas=%d' % r if r > 1 else '', m * r,
            ' or '.join(map(str, multiples)),
            ', or num_micro_batches of %s' % ', '.join(map(str, counts)) if counts else ''))

  def _CheckInputShape(self, inputs):
    """A clear error for inputs of another shape than the model was built for (beyond the batch dimension)."""
    built = self._config['input_shape']
    if built is None:
      return
    given = {k: v.shape for k, v in inputs.items()} if isinstance(inputs, dict) else {None: inputs.shape}
    expected = built if isinstance(built, dict) else {None: built}
    for key, shape in given.items():
      want = expected.get(key)
      if want is None or (len(want) == len(shape) and all(
          w is None or s is None or w == s for w, s in zip(want[1:], list(shape)[1:]))):
        continue
      raise errors.ConfigError(
          'lingpipe.keras.Pipeline %r: the model was built for inputs%s of shape %s (batch first), and got %s. '
          'Feed inputs of that shape, or build the model for this one (keras.Input(shape=%s)).' % (
              self.name, '' if key is None else ' %r' % key, tuple(want), tuple(shape), tuple(shape[1:])))

  def compute_output_spec(self, inputs, training=False):
    spec = inputs
    for unit in self._Units():
      spec = unit.compute_output_spec(spec)
    return spec

  # Keras leaves the batch dimension open when the data do not divide into batches: the batch size comes from
  # the batch_size argument then (Keras's default, 32, for arrays).
  def fit(self, x=None, y=None, batch_size=None, *args, **kwargs):  # pylint: disable=keyword-arg-before-vararg
    placement.RefuseStrategyScope('fit')
    self._RefuseOpenBatch(x)
    self.ChooseAt(x, batch_size or 32)
    self._NoteBatchSize(batch_size, x, training=True)
    return super().fit(x, y, batch_size, *args, **kwargs)

  def evaluate(self, x=None, y=None, batch_size=None, *args, **kwargs):  # pylint: disable=keyword-arg-before-vararg
    self._RefuseOpenBatch(x)
    self.ChooseAt(x, batch_size or 32)
    self._NoteBatchSize(batch_size, x)
    return super().evaluate(x, y, batch_size, *args, **kwargs)

  def predict(self, x, batch_size=None, *args, **kwargs):  # pylint: disable=keyword-arg-before-vararg
    self._RefuseOpenBatch(x)
    self.ChooseAt(x, batch_size or 32)
    self._NoteBatchSize(batch_size, x)
    return super().predict(x, batch_size, *args, **kwargs)

  def _NoteBatchSize(self, batch_size, x, training=False):
    """Remembers the largest batch size (padding, above). Before Keras traces anything: a wrong number of inputs
    and, in training (which does not pad), a batch that M does not divide are one line here, not an error from
    inside Keras's call."""
    if isinstance(x, (list, tuple)):
      self._NamedInputs(x)
    if training and isinstance(x, tf.data.Dataset):
      self.CheckBatch(tf.nest.flatten(x.element_spec)[0].shape[0], "the dataset's batch")
    if batch_size is None:
      if x is None or not isinstance(tf.nest.flatten(x)[0], (np.ndarray, tf.Tensor)):
        return  # A dataset or generator batches itself.
      batch_size = 32  # Keras's default for arrays.
    if training:
      self.CheckBatch(batch_size, 'batch_size')
    if self._batch_size is None or batch_size > self._batch_size:
      self._batch_size = batch_size
      # Step functions traced for a smaller size would pad to it: trace them again.
      self.train_function = self.test_function = self.predict_function = None

  def compile(self, *args, jit_compile=False, **kwargs):  # pylint: disable=arguments-differ
    if jit_compile and jit_compile != 'auto':
      raise errors.ConfigError('lingpipe.keras.Pipeline: jit_compile=True cannot compile one XLA cluster across '
                               'the pipeline\'s devices; leave it False.')
    super().compile(*args, jit_compile=False, **kwargs)
    # Keras wraps the optimizer of a model whose own policy is mixed_float16; the pipeline's is the default one.
    if (kwargs.get('auto_scale_loss', True) and self._mixed_float16 and self.optimizer is not None
        and not isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)):
      self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer, name='loss_scale_optimizer')
    if self._pending is None:  # Else once the pipeline is built (ChooseAt): its variables are the units' copies.
      self._BuildOptimizerOnCellDevices()

  def _BuildOptimizerOnCellDevices(self):
    """Creates the optimizer's slots (Adam's momentum and velocity, ...) on the device of their variable.

    Keras creates them under the current device, all on cell 0's: its memory would hold every cell's slots, and
    each update would copy them across devices. Keras's update ops are already colocated with their variable."""
    optimizer = self.optimizer
    if optimizer is None or optimizer.built:
      return
    creator = getattr(optimizer, 'inner_optimizer', optimizer)  # LossScaleOptimizer's slots are its inner's.
    add_variable_from_reference = creator.add_variable_from_reference

    def OnTheVariablesDevice(reference_variable, *args, **kwargs):
      with tf.device(getattr(reference_variable, 'value', reference_variable).device):
        return add_variable_from_reference(reference_variable, *args, **kwargs)

    creator.add_variable_from_reference = OnTheVariablesDevice
    try:
      optimizer.build(self.trainable_variables)
    finally:
      del creator.add_variable_from_reference


def _Shapes(units):
  """Each unit's input shape, then the last unit's output shape, following the known ones through
  compute_output_spec (None where unknown)."""
  shapes, shape = [], None
  for unit, given in units:
    shape = given if given is not None else shape
    shapes.append(shape)
    if shape is not None:
      try:
        spec = unit.compute_output_spec(keras_layer.KerasSpec(shape))
        shape = tf.nest.map_structure(lambda s: tuple(s.shape), spec)
      except Exception:  # pylint: disable=broad-except
        shape = None  # The unit will be built by its first call.
  return shapes + [shape]


def _ParamsShape(shape):
  if isinstance(shape, dict):
    return {k: list(v) for k, v in shape.items()}
  return list(shape)
