"""Cutting a flat list of layers into K contiguous cells.

`balance` is an explicit list of layer counts, or a method that gives each layer a cost and then
finds the cut minimizing the most expensive cell (what bounds a pipeline's speed or memory):
  - 'uniform': every layer costs 1;
  - 'params':  number of trainable parameters;
  - 'flops':   forward flops from each layer's FPropMeta, chained from the input shapes;
  - 'time':    measured forward+backward seconds on a sample batch (like torchgpipe's balance_by_time);
  - 'memory':  measured peak bytes of forward+backward on a sample batch (like torchgpipe's balance_by_size).
"""

import time

import numpy as np
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import memory_stats

METHODS = ('uniform', 'params', 'flops', 'time', 'memory')


def CheckBalance(balance, num_layers, num_splits=None):
  """Validates an explicit balance list; returns it as a list of ints."""
  balance = list(balance)
  if num_splits is not None and len(balance) != num_splits:
    raise errors.ConfigError('balance %s has %d cells but num_splits is %d.' % (balance, len(balance), num_splits))
  if any(not isinstance(b, (int, np.integer)) or b < 1 for b in balance):
    raise errors.ConfigError('balance %s has an empty cell: every cell needs at least one layer.' % (balance,))
  if sum(balance) != num_layers:
    raise errors.ConfigError('balance %s sums to %d but there are %d layers.' % (balance, sum(balance),
                                                                                num_layers))
  return [int(b) for b in balance]


def BalanceByCost(costs, num_splits):
  """Counts of a contiguous cut of `costs` into num_splits non-empty parts minimizing the largest part's sum."""
  n = len(costs)
  if num_splits > n:
    raise errors.ConfigError('num_splits %d is larger than the number of layers %d; use at most %d splits.' % (
        num_splits, n, n))
  if num_splits < 1:
    raise errors.ConfigError('num_splits must be >= 1, got %d.' % num_splits)
  prefix = np.concatenate([[0.0], np.cumsum(np.asarray(costs, np.float64))])
  inf = float('inf')
  # best[k][i]: the smallest possible largest part when the first i layers form k parts.
  best = np.full((num_splits + 1, n + 1), inf)
  cut = np.zeros((num_splits + 1, n + 1), np.int64)
  best[0][0] = 0.0
  for k in range(1, num_splits + 1):
    for i in range(k, n - (num_splits - k) + 1):
      for j in range(k - 1, i):
        value = max(best[k - 1][j], prefix[i] - prefix[j])
        if value < best[k][i] - 1e-12:  # Ties keep the earliest cut, so equal costs give front-loaded cells.
          best[k][i], cut[k][i] = value, j
  counts, i = [], n
  for k in range(num_splits, 0, -1):
    j = int(cut[k][i])
    counts.append(i - j)
    i = j
  return counts[::-1]


def ParamCounts(layer_params):
  """Trainable parameters of each layer (each built once on the CPU to count them)."""
  counts = []
  with tf.device('/CPU:0'):
    for i, p in enumerate(layer_params):
      layer = p.Copy().Set(name=p.name or 'layer_%d' % i).Instantiate()
      counts.append(sum(v.shape.num_elements() for v in layer.trainable_variables))
  return counts


def FlopCounts(layer_params, input_shapes):
  """Forward flops of each layer, feeding each FPropMeta the previous layer's output shapes."""
  flops, shapes = [], input_shapes
  for p in layer_params:
    meta = p.cls.FPropMeta(p, shapes)
    flops.append(meta.flops)
    shapes = meta.out_shapes[0]
  return flops


def _Profile(layer_params, sample_inputs, measure, repeats=3):
  """measure(run) for each layer, where run() does one forward+backward of that layer on its real input."""
  from lingpipe.core import context  # pylint: disable=g-import-not-at-top
  costs, x = [], sample_inputs
  for i, p in enumerate(layer_params):
    layer = p.Copy().Set(name=p.name or 'layer_%d' % i).Instantiate()

    def Run(layer=layer, x=x):
      with tf.GradientTape() as tape:
        tape.watch(tf.nest.flatten(x))
        with context.Training(True):
          y = layer.FProp(x)
        total = tf.add_n([tf.reduce_sum(t) for t in tf.nest.flatten(y) if t.dtype.is_floating])
      tape.gradient(total, list(layer.trainable_variables) + [t for t in tf.nest.flatten(x) if t.dtype.is_floating])
      return y

    y = Run()  # Warm-up (and the next layer's input).
    costs.append(measure(Run, repeats))
    x = y
  return costs


def _MeasureTime(run, repeats):
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    best = min(best, time.perf_counter() - start)
  return best


def _MeasureMemory(run, repeats):
  del repeats
  return max(memory_stats.PeakBytes(run, what="balance='memory'"), 1)


def LayerCosts(layer_params, method, input_shapes=None, sample_inputs=None):
  """The cost of each layer under `method` (see the module docstring)."""
  if method == 'uniform':
    return [1.0] * len(layer_params)
  if method == 'params':
    return [max(c, 1) for c in ParamCounts(layer_params)]
  if method == 'flops':
    if input_shapes is None:
      raise errors.ConfigError("balance='flops' needs the input shapes (PipeliningLayer.input_shapes).")
    return [max(f, 1) for f in FlopCounts(layer_params, input_shapes)]
  if method in ('time', 'memory'):
    if sample_inputs is None:
      raise errors.ConfigError("balance=%r profiles the layers and needs a sample batch (PipeliningLayer."
                               "input_shapes makes a random one)." % method)
    if method == 'memory':  # Before building anything: a process without allocator statistics fails at once.
      memory_stats.CheckAvailable(memory_stats.MeasuredDevice(), "balance='memory'")
    return _Profile(layer_params, sample_inputs, _MeasureTime if method == 'time' else _MeasureMemory)
  raise errors.ConfigError('Unknown balance method %r; expected a list of layer counts or one of %s.%s' % (
      method, ', '.join(METHODS), errors.DidYouMean(str(method), METHODS)))


def Partition(layer_params, num_splits, balance='uniform', input_shapes=None, sample_inputs=None):
  """Layer counts per cell for `balance` (a list, or a method of METHODS)."""
  n = len(layer_params)
  if num_splits > n:
    raise errors.ConfigError('num_splits %d is larger than the number of layers %d; use at most %d splits.' % (
        num_splits, n, n))
  if isinstance(balance, (list, tuple)):
    return CheckBalance(balance, n, num_splits)
  return BalanceByCost(LayerCosts(layer_params, balance, input_shapes, sample_inputs), num_splits)


def ExpandedLayers(layers):
  """The units of a `layers` list: an entry whose class has ExpandUnits(params) stands for several
  (a Keras model named by its builder becomes one KerasLayer per piece, known only once the model is
  built)."""
  return [unit for layer in layers
          for unit in (layer.cls.ExpandUnits(layer) if hasattr(layer.cls, 'ExpandUnits') else [layer])]
