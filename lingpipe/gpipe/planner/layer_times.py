"""Measured forward and backward seconds of each layer, for the planner's speed model (memory_plan.py).

Flops say how much a layer computes, not how long it takes: a depthwise convolution or a batch norm
moves more bytes per flop than a matrix product, and a small micro-batch uses a machine less well
than a large one. Here each layer is built for real and run as a pipeline runs it (traced, in
training, on a batch of the given size), so the planner can add the measured times of a cell's
layers instead of their flops. The cost of calling a traced function is measured apart and left out,
since a cell runs all its layers in one call. Each layer runs on what the layer before it gave (token
ids stay integers, labels reach the loss), from a sample of the pipeline's inputs. Layers of equal
Params and input specs are measured once (an AmoebaNet's repeated normal cells, a Transformer's
layers).
"""

import time
from typing import NamedTuple, Tuple

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap


_CALL_REPEATS = 20


class Times(NamedTuple):
  """Seconds per layer for one batch of `batch_size`."""
  batch_size: int
  forward: Tuple[float, ...]
  backward: Tuple[float, ...]  # the backward alone: forward and backward together, less the forward
  inputs: Tuple[object, ...] = ()  # each layer's input specs (Specs') at a measured batch size, if known


def _WithBatch(shapes, batch_size, batch_dim):
  """`shapes` (a shape, or a dict of them) with the batch dimension set to `batch_size`."""
  if isinstance(shapes, dict):
    return {k: _WithBatch(v, batch_size, batch_dim) for k, v in shapes.items()}
  dims = tf.TensorShape(shapes).as_list()
  dims[batch_dim] = batch_size
  return tf.TensorShape(dims)


def Specs(shapes, dtype, input_dtypes=None):
  """tf.TensorSpecs (a NestedMap of them for a dict) of `shapes`, in `dtype` where `input_dtypes` (a dtype, or a
  dict of them by the same keys, as PipeliningLayer's) names none."""
  if isinstance(shapes, dict):
    named = input_dtypes if isinstance(input_dtypes, dict) else {}
    return NestedMap({k: Specs(v, dtype, named.get(k, None if named else input_dtypes)) for k, v in shapes.items()})
  return tf.TensorSpec(tf.TensorShape(shapes), tf.as_dtype(input_dtypes or dtype))


def _Rebatched(specs, batch_size, batch_dim):
  def One(spec):
    dims = spec.shape.as_list()
    dims[batch_dim] = batch_size
    return tf.TensorSpec(dims, spec.dtype)
  return tf.nest.map_structure(One, specs)


def SampleInputs(specs):
  """Tensors as `specs` (Specs'): floating ones from a normal, the others zeros (valid ids and labels)."""
  def One(spec):
    if spec.dtype.is_floating:
      return tf.random.normal(spec.shape, dtype=spec.dtype)
    return tf.zeros(spec.shape, spec.dtype)
  return tf.nest.map_structure(One, specs)


def SampleBatch(input_shapes, batch_size, dtype, input_dtypes=None, batch_dim=0):
  """SampleInputs of a batch of `batch_size` shaped as `input_shapes` (any batch), as Specs makes them."""
  return SampleInputs(Specs(_WithBatch(input_shapes, batch_size, batch_dim), dtype, input_dtypes))


def _SpecsOf(x):
  return tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), x)


def Best(run, repeats):
  """The shortest of `repeats` timed calls of run() (its tensors' values fetched), after one untimed call."""
  run()  # Traces, and warms the kernels.
  with tf.device('/device:CPU:0'):
    own = tf.constant(0).device.split('/device:')[0] + '/'  # this process's job and task
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: _Fetch(t, own), run())
    best = min(best, time.perf_counter() - start)
  return best


def _Fetch(t, own):
  """The value of tensor `t` where it is in this process (device prefix `own`); one element of it where it is on a
  worker: the timing waits for it without the whole tensor crossing the network, which a pipeline does not pay."""
  if not hasattr(t, 'numpy'):
    return t
  if not t.device or t.device.startswith(own):
    return t.numpy()
  with tf.device(t.device):
    return tf.reshape(t, [-1])[:1].numpy()


class _Timed:
  """One layer built once, with traced functions traced again for each batch size: a pipeline's cell
  is traced at its micro-batch's exact shape, and a trace with the batch dimension relaxed ran a
  dense layer's backward at half the speed (its two matrix products no longer ran side by side on
  two inter-op threads)."""

  def __init__(self, layer_params):
    self.layer = layer = layer_params.Copy().Set(name=layer_params.name or 'layer').Instantiate()

    def Forward(x):
      # Batch norm hands its moments over, as inside a pipeline (the averages move once per step,
      # outside).
      with context.Training(True), context.CollectBatchNormStats(context.BatchNormStats(discard=True)):
        return layer.FProp(x)

    def ForwardBackward(x):
      flat_x = [t for t in tf.nest.flatten(x) if t.dtype.is_floating]  # A pipeline's cell passes their gradient on.
      with tf.GradientTape() as tape:
        tape.watch(flat_x)
        y = [t for t in tf.nest.flatten(Forward(x)) if t.dtype.is_floating]
      grads = tape.gradient(y, list(layer.trainable_variables) + flat_x,
                            output_gradients=[tf.ones_like(t) for t in y])
      return [g for g in grads if g is not None]

    self.forward = tf.function(Forward)
    self.forward_backward = tf.function(ForwardBackward)
    # What calling a traced function costs: a cell calls its layers inside one, not one each.
    self.call = tf.function(tf.nest.flatten)

  def Measure(self, x, repeats):
    """(forward seconds, backward seconds) on inputs `x`."""
    # Cheap, and slow the first few times (allocations): timed more often than the layer, so that it
    # is not overstated and taken off the forward.
    call = Best(lambda: self.call(x), max(repeats, _CALL_REPEATS))
    forward = Best(lambda: self.forward(x), repeats)
    both = Best(lambda: self.forward_backward(x), repeats)
    return max(forward - call, 0.0), max(both - forward, 0.0)


def _Text(p, index):
  """What makes layer params `p` (the `index`-th layer) alike another's: their text without the name."""
  try:
    return p.Copy().Set(name='').ToText()
  except errors.ConfigError:  # A param with no text form (a Keras layer): this layer alone.
    return 'layer %d' % index


def _Built(built, p, text, specs, batch_dim, dtype):
  """The _Timed layer of params `p` (text `text`) for inputs as `specs`, from `built` or made into it."""
  layer_key = (p.cls, text, repr(_Rebatched(specs, 1, batch_dim)), dtype)
  if layer_key not in built:
    built[layer_key] = _Timed(p)
  return built[layer_key]


def _Run(index, p, fn, x):
  """fn(x) for layer `index` (params `p`); a layer that cannot run on the sample inputs is one ConfigError."""
  try:
    return fn(x)
  except (tf.errors.ResourceExhaustedError, MemoryError):
    raise
  except Exception as e:  # pylint: disable=broad-except  (a traced layer's error reaches here wrapped by AutoGraph)
    raise errors.ConfigError(
        'The planner could not run layer %d (%s) on a sample of its inputs (%s): %s. If the pipeline\'s inputs are '
        'not all floating, name the others\' dtypes in its input_dtypes (e.g. {\'ids\': \'int32\'}).' % (
            index, p.cls.__name__, ', '.join('%s %s' % (s.dtype.name, s.shape) for s in tf.nest.flatten(
                _SpecsOf(x))), str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)) from e


def Measure(layer_params, input_shapes, batch_size, dtype=tf.float32, repeats=3, batch_dim=0, log=None, built=None,
            input_dtypes=None):
  """Times of each layer of `layer_params` (a flat list) on a batch of `batch_size` examples shaped
  as `input_shapes` (the pipeline's, whatever their batch), computing in `dtype`; the inputs that
  `input_dtypes` (PipeliningLayer's) names are of those dtypes. `log(text)` is told of each layer
  measured. `built`: a dict kept across calls at several batch sizes, so that each distinct layer is
  built and traced once for all of them."""
  dtype = tf.as_dtype(dtype)
  x = SampleBatch(input_shapes, batch_size, dtype, input_dtypes, batch_dim)
  built = {} if built is None else built
  measured, forward, backward, inputs = {}, [], [], []
  for i, p in enumerate(layer_params):
    p = p.Copy().Set(fprop_dtype=p.fprop_dtype or dtype)
    text = _Text(p, i)
    specs = _SpecsOf(x)
    timed = _Built(built, p, text, specs, batch_dim, dtype)
    key = (p.cls, text, repr(specs))
    if key not in measured:
      measured[key] = _Run(i, p, lambda x: timed.Measure(x, repeats), x)  # pylint: disable=cell-var-from-loop
      if log:
        log('layer %d (%s): forward %.4f s, backward %.4f s at batch %d' % (
            i, p.cls.__name__, measured[key][0], measured[key][1], batch_size))
    forward.append(measured[key][0])
    backward.append(measured[key][1])
    inputs.append(specs)
    x = _Run(i, p, timed.forward, x)
  return Times(batch_size, tuple(forward), tuple(backward), tuple(inputs))


def Interpolate(smaller, larger, batch_size):
  """Times at `batch_size`, between two measured Times of a smaller and a larger batch: each layer's
  times linear in the batch size between them (a fixed cost and a cost per example)."""
  w = (batch_size - smaller.batch_size) / float(larger.batch_size - smaller.batch_size)
  mix = lambda a, b: tuple((1 - w) * x + w * y for x, y in zip(a, b))
  return Times(batch_size, mix(smaller.forward, larger.forward), mix(smaller.backward, larger.backward),
               larger.inputs)


class Layer(NamedTuple):
  """One of a model's layers as the pipeline runs it: its params (in the compute dtype) and input specs."""
  params: object
  inputs: object  # a tf.TensorSpec, or a NestedMap of them, at the measured batch size
  index: int  # its place in the model's flat list of layers


def Heaviest(layer_params, input_shapes, times, dtype=tf.float32, batch_dim=0) -> Layer:
  """The layer that `times` (Measure's) says takes longest, with its inputs' specs at times.batch_size."""
  dtype = tf.as_dtype(dtype)
  costs = [f + b for f, b in zip(times.forward, times.backward)]
  heaviest = costs.index(max(costs))
  p = layer_params[heaviest].Copy()
  p.Set(fprop_dtype=p.fprop_dtype or dtype)
  if times.inputs:
    return Layer(p, _Rebatched(times.inputs[heaviest], times.batch_size, batch_dim), heaviest)
  shapes = _WithBatch(input_shapes, times.batch_size, batch_dim)  # Times made by hand: floating inputs.
  for q in layer_params[:heaviest]:
    q = q.Copy().Set(fprop_dtype=q.fprop_dtype or dtype)
    shapes = q.cls.FPropMeta(q, shapes).out_shapes[0]
  return Layer(p, Specs(shapes, dtype), heaviest)


def RunsOnDevice(layer, dtype=tf.float32, batch_dim=0, built=None):
  """A function of a device name that runs, on that device, the forward and backward of `layer` (a
  Layer, e.g. Heaviest's, measured with the same `built`) at its inputs: a unit of this model's own
  work. Each device gets its own copy of the layer and reads back one number: on worker processes a copy
  shared with another worker, or gradients fetched whole, would time gRPC, not the devices' work."""
  dtype = tf.as_dtype(dtype)
  built = {} if built is None else built
  text = _Text(layer.params, layer.index)
  copies, inputs = {}, {}

  def Run(device):
    with tf.device(device):
      if device not in copies:
        copies[device] = _Built(built if not copies else {}, layer.params, text, layer.inputs, batch_dim, dtype)
        inputs[device] = SampleInputs(layer.inputs)
      grads = copies[device].forward_backward(inputs[device])
      tf.add_n([tf.reduce_sum(tf.cast(g.values if isinstance(g, tf.IndexedSlices) else g, tf.float32))
                for g in grads]).numpy()
  return Run
