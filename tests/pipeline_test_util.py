"""Layers and helpers for pipeline tests: NestedMap layers with skip fields and int side inputs."""

import numpy as np
import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import weight_init
from lingpipe.core.nested_map import NestedMap
from lingpipe.distributed import cluster
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import linear
from lingpipe.layers import sequential
from lingpipe.model import model_registry


class SkipProjection(base_layer.BaseLayer):
  """NestedMap(x, skip, mask) -> NestedMap(x=tanh(x W) * mask + skip, skip=x, mask): a skip field and an int
  side input that every cell passes on."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('dim', 4, 'Depth.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', weight_init.WeightParams([self.params.dim, self.params.dim]))

  def FProp(self, inputs):
    mask = tf.cast(inputs.mask, self.fprop_dtype)[:, None]
    x, skip = self.ToFProp(inputs.x), self.ToFProp(inputs.skip)
    return NestedMap(x=tf.tanh(tf.matmul(x, self.theta.w)) * mask + skip, skip=x, mask=inputs.mask)

  @classmethod
  def FPropMeta(cls, params, shapes):
    return base_layer.Meta(NestedMap(shapes), 2 * shapes['x'].num_elements() * params.dim)


class Rename(base_layer.BaseLayer):
  """Outputs NestedMap(h=...): the next SkipProjection cannot use it."""

  def FProp(self, inputs):
    return NestedMap(h=inputs.x)


def Tanh(n, dim=8, dtype=tf.float32):
  return [linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim, activation='tanh', dtype=dtype)
          for _ in range(n)]


def Pair(layers, dtype=tf.float32, fprop_dtype=None, **pipeline_kwargs):
  """(plain SequentialLayer, PipeliningLayer) over copies of `layers`, with the same weights."""
  plain = sequential.SequentialLayer.Params().Set(name='net', dtype=dtype, fprop_dtype=fprop_dtype,
                                                  sub=[l.Copy() for l in layers])
  pipe = pipelining_layer.PipeliningLayer.Params().Set(name='net', dtype=dtype, fprop_dtype=fprop_dtype,
                                                       layers=[l.Copy() for l in layers], **pipeline_kwargs)
  plain, pipe = plain.Instantiate(), pipe.Instantiate()
  for a, b in zip(plain.trainable_variables, pipe.trainable_variables):
    assert a.shape == b.shape
    b.assign(a)
  return plain, pipe


def StepGraph(pipe, x):
  """The GraphDef of a traced training step (loss, then gradients of every variable) of `pipe` on `x`."""

  @tf.function(autograph=False)
  def Step(x):
    with tf.GradientTape() as tape:
      with context.Training(True):
        loss = tf.reduce_sum(pipe.FProp(x))
    return tape.gradient(loss, pipe.trainable_variables)

  return Step.get_concrete_function(x).graph.as_graph_def()


def CellCalls(graph_def):
  """Calls of the cells' forward and backward functions in a step graph, loop bodies included."""
  bodies = [graph_def.node] + [f.node_def for f in graph_def.library.function]
  return sum(1 for nodes in bodies for n in nodes if n.op in ('PartitionedCall', 'StatefulPartitionedCall')
             and ('Cell' in n.attr['f'].func.name or 'Step' in n.attr['f'].func.name))


def LossAndGrads(layer, inputs, seed=0, step=0):
  """tf.function: (loss, grads of variables, grads of float inputs) of a fixed random projection of the output."""

  @tf.function(autograph=False)
  def Run(inputs):
    float_inputs = [t for t in tf.nest.flatten(inputs) if t.dtype.is_floating]
    with tf.GradientTape() as tape:
      tape.watch(float_inputs)
      with context.Training(True), context.StepSeed(step):
        out = layer.FProp(inputs)
      if isinstance(out, dict):  # A state (x, prev, ...) between layers, or a network's outputs (features, ...).
        x = out.x if 'x' in out else tf.concat([tf.reshape(t, [t.shape[0], -1]) for t in tf.nest.flatten(out)], 1)
      else:
        x = out
      target = tf.constant(np.random.RandomState(seed).normal(size=x.shape), x.dtype)
      loss = tf.reduce_sum(tf.square(x - target))
    grads = tape.gradient(loss, list(layer.trainable_variables) + float_inputs)
    return loss, grads[:len(layer.trainable_variables)], grads[len(layer.trainable_variables):]

  return Run(inputs)


def LossStep(layer, inputs, targets, loss_fn, with_loss, watch=lambda inputs: [], step=0):
  """tf.function training step with loss_fn(outputs, targets) -> (loss, metrics): (loss, metrics, gradients of the
  variables, gradients of the tensors watch(inputs) picks and the tape watches). With `with_loss`, through
  layer.FPropWithLoss (a pipeline's loss inside it); otherwise loss_fn of layer.FProp."""

  @tf.function(autograph=False)  # zero_bubble needs a graph.
  def Run(inputs):
    watched = watch(inputs)
    with tf.GradientTape() as tape:
      tape.watch(watched)
      with context.Training(True), context.StepSeed(step):
        if with_loss:
          loss, metrics = layer.FPropWithLoss(inputs, targets, loss_fn)
        else:
          loss, metrics = loss_fn(layer.FProp(inputs), targets)
    variables = list(layer.trainable_variables)
    grads = tape.gradient(loss, variables + watched)
    return loss, metrics, grads[:len(variables)], grads[len(variables):]

  return Run(inputs)


def AssertClose(reference, actual):
  """float32 transparency: |a - b| <= 1e-5 |b| + 1e-6 max|b| (what held for K=4, M=1..16 on this machine), for
  results of the same structure (a missing or extra gradient fails)."""
  try:
    tf.nest.assert_same_structure(reference, actual, check_types=False)
  except (ValueError, TypeError) as e:
    raise AssertionError('results differ in structure: %s' % e) from e
  for ref, act in zip(tf.nest.flatten(reference), tf.nest.flatten(actual)):
    ref, act = np.asarray(ref), np.asarray(act)
    scale = np.abs(ref).max() if ref.size else 0.0
    np.testing.assert_allclose(act, ref, rtol=1e-5, atol=1e-6 * scale + 1e-30)


def PipelinedModels(steppable_only=False):
  """Names of the project's registered models with a PipeliningLayer (not those other tests register); with
  steppable_only, only those test_models.py steps in the default suite (the others are too big for CI)."""
  names = []
  for name, cls in sorted(model_registry.GetAllRegisteredModels().items()):
    if not cls.__module__.startswith('lingpipe.params.'):
      continue
    if steppable_only and getattr(cls, 'ONE_STEP_TEST', 'fast') != 'fast':
      continue
    if cluster.PipelineParams(model_registry.GetParams(name, 'Train').task):
      names.append(name)
  return names
