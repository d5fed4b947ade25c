"""Layers of one kind run as calls of one traced function (gpipe/engine/layer_functions.py): the pipeline stays the
plain model, each layer drawing its own dropout masks and handing over its own batch-norm moments."""

import numpy as np
import tensorflow as tf

from lingpipe.core import context
from lingpipe.gpipe.engine import layer_functions
from lingpipe.layers import batch_norm
from lingpipe.layers import dropout
from lingpipe.layers import linear
from lingpipe.layers import sequential
import pipeline_test_util as util

DIM = 16


def _Block():
  """A layer of three sub-layers, random masks and batch statistics among them."""
  return sequential.SequentialLayer.Params().Set(sub=[
      linear.ProjectionLayer.Params().Set(input_dim=DIM, output_dim=DIM, activation='tanh'),
      batch_norm.BatchNormLayer.Params().Set(dim=DIM),
      dropout.DropoutLayer.Params().Set(keep_prob=0.7, deterministic=True)])


def _Calls(graph_def):
  """How many calls of a layer kind's function the step's functions make."""
  return sum(n.op.endswith('PartitionedCall') and 'Body' in n.attr['f'].func.name
             for f in graph_def.library.function for n in f.node_def)


def test_shared_layers_keep_the_plain_models_loss_gradients_masks_and_moments():
  plain, pipe = util.Pair([_Block() for _ in range(6)], num_splits=2, num_micro_batches=1, remat='always')
  x = tf.constant(np.random.RandomState(5).normal(size=(8, DIM)), tf.float32)
  # Each layer's masks are its own: drawn from one seed for all, the loss would not be the plain model's.
  util.AssertClose(util.LossAndGrads(plain, x, step=3), util.LossAndGrads(pipe, x, step=3))
  assert _Calls(util.StepGraph(pipe, x)) >= 6

  collector = context.BatchNormStats()

  @tf.function(autograph=False)
  def Moments(x):
    with context.Training(True), context.StepSeed(3), context.CollectBatchNormStats(collector):
      pipe.FProp(x)
    return {path: part.Mean() for path, (_, part) in collector.moments.items()}

  means = Moments(x)
  bn_paths = [sub.path for k in range(pipe.num_cells) for layer in pipe.CellLayers(k) for sub in layer.Walk()
              if isinstance(sub, batch_norm.BatchNormLayer)]
  assert sorted(means) == sorted(bn_paths) and len(bn_paths) == 6, (sorted(means), bn_paths)
  assert len({float(tf.reduce_sum(m)) for m in means.values()}) == 6  # Each layer's own batch statistics.


def test_kinds_are_a_class_and_params_less_the_name():
  _, pipe = util.Pair(util.Tanh(2) + [linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8)],
                      num_splits=1, num_micro_batches=2)
  layers = pipe.CellLayers(0)
  shared = layer_functions.LayerFunctions().Shared(layers)
  assert shared == {id(layers[0]), id(layers[1])}  # The third has no tanh: a kind of its own, run unrolled.
