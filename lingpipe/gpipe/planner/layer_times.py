"""Measured forward and backward seconds of each layer, for the planner's speed model (memory_plan.py).

Flops say how much a layer computes, not how long it takes: a depthwise convolution or a batch norm
moves more bytes per flop than a matrix product, and a small micro-batch uses a machine less well
than a large one. Here each layer is built for real and run as a pipeline runs it (traced, in
training, on a batch of the given size), so the planner can add the measured times of a cell's
layers instead of their flops. The cost of calling a traced function is measured apart and left out,
since a cell runs all its layers in one call. Layers of equal Params and input shapes are measured
once (an AmoebaNet's repeated normal cells, a Transformer's layers).
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


def _WithBatch(shapes, batch_size, batch_dim):
  """`shapes` (a shape, or a dict of them) with the batch dimension set to `batch_size`."""
  if isinstance(shapes, dict):
    return {k: _WithBatch(v, batch_size, batch_dim) for k, v in shapes.items()}
  dims = tf.TensorShape(shapes).as_list()
  dims[batch_dim] = batch_size
  return tf.TensorShape(dims)


def RandomInputs(shapes, dtype):
  """Random tensors (a NestedMap of them for a dict) shaped as `shapes`, in `dtype`."""
  if isinstance(shapes, dict):
    return NestedMap({k: RandomInputs(v, dtype) for k, v in shapes.items()})
  return tf.random.normal(tf.TensorShape(shapes).as_list(), dtype=dtype)


def Best(run, repeats):
  """The shortest of `repeats` timed calls of run() (its tensors' values fetched), after one untimed call."""
  run()  # Traces, and warms the kernels.
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, 'numpy') else t, run())
    best = min(best, time.perf_counter() - start)
  return best


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

    self.forward = tf.function(lambda x: tf.nest.flatten(Forward(x)))
    self.forward_backward = tf.function(ForwardBackward)
    # What calling a traced function costs: a cell calls its layers inside one, not one each.
    self.call = tf.function(tf.nest.flatten)

  def Measure(self, shapes, dtype, repeats):
    x = RandomInputs(shapes, dtype)
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


def _Built(built, p, text, shapes, batch_dim, dtype):
  """The _Timed layer of params `p` (text `text`) for inputs shaped `shapes`, from `built` or made into it."""
  layer_key = (p.cls, text, repr(_WithBatch(shapes, 1, batch_dim)), dtype)
  if layer_key not in built:
    built[layer_key] = _Timed(p)
  return built[layer_key]


def Measure(layer_params, input_shapes, batch_size, dtype=tf.float32, repeats=3, batch_dim=0, log=None, built=None):
  """Times of each layer of `layer_params` (a flat list) on a batch of `batch_size` examples shaped
  as `input_shapes` (the pipeline's, whatever their batch), computing in `dtype`. `log(text)` is
  told of each layer measured. `built`: a dict kept across calls at several batch sizes, so that
  each distinct layer is built and traced once for all of them."""
  dtype = tf.as_dtype(dtype)
  shapes = _WithBatch(input_shapes, batch_size, batch_dim)
  built = {} if built is None else built
  measured, forward, backward = {}, [], []
  for i, p in enumerate(layer_params):
    p = p.Copy().Set(fprop_dtype=p.fprop_dtype or dtype)
    text = _Text(p, i)
    key = (p.cls, text, repr(shapes))
    if key not in measured:
      measured[key] = _Built(built, p, text, shapes, batch_dim, dtype).Measure(shapes, dtype, repeats)
      if log:
        log('layer %d (%s): forward %.4f s, backward %.4f s at batch %d' % (
            i, p.cls.__name__, measured[key][0], measured[key][1], batch_size))
    forward.append(measured[key][0])
    backward.append(measured[key][1])
    shapes = p.cls.FPropMeta(p, shapes).out_shapes[0]
  return Times(batch_size, tuple(forward), tuple(backward))


def Interpolate(smaller, larger, batch_size):
  """Times at `batch_size`, between two measured Times of a smaller and a larger batch: each layer's
  times linear in the batch size between them (a fixed cost and a cost per example)."""
  w = (batch_size - smaller.batch_size) / float(larger.batch_size - smaller.batch_size)
  mix = lambda a, b: tuple((1 - w) * x + w * y for x, y in zip(a, b))
  return Times(batch_size, mix(smaller.forward, larger.forward), mix(smaller.backward, larger.backward))


class Layer(NamedTuple):
  """One of a model's layers as the pipeline runs it: its params (in the compute dtype) and input shapes."""
  params: object
  input_shapes: object  # a shape, or a dict of them, at the measured batch size
  index: int  # its place in the model's flat list of layers


def Heaviest(layer_params, input_shapes, times, dtype=tf.float32, batch_dim=0) -> Layer:
  """The layer that `times` (Measure's) says takes longest, with its inputs' shapes at times.batch_size."""
  dtype = tf.as_dtype(dtype)
  costs = [f + b for f, b in zip(times.forward, times.backward)]
  heaviest = costs.index(max(costs))
  shapes = _WithBatch(input_shapes, times.batch_size, batch_dim)
  for p in layer_params[:heaviest]:
    p = p.Copy().Set(fprop_dtype=p.fprop_dtype or dtype)
    shapes = p.cls.FPropMeta(p, shapes).out_shapes[0]
  p = layer_params[heaviest].Copy()
  return Layer(p.Set(fprop_dtype=p.fprop_dtype or dtype), shapes, heaviest)


def RunsOnDevice(layer, dtype=tf.float32, batch_dim=0, built=None):
  """A function of a device name that runs, on that device, the forward and backward of `layer` (a
  Layer, e.g. Heaviest's, measured with the same `built`) at its input shapes: a unit of this
  model's own work."""
  dtype = tf.as_dtype(dtype)
  built = {} if built is None else built
  timed = _Built(built, layer.params, _Text(layer.params, layer.index), layer.input_shapes, batch_dim, dtype)
  inputs = {}

  def Run(device):
    with tf.device(device):
      if device not in inputs:
        inputs[device] = RandomInputs(layer.input_shapes, dtype)
      tf.nest.map_structure(lambda t: t.numpy(), timed.forward_backward(inputs[device]))
  return Run
