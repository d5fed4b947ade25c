"""AmoebaNet-D and ResNet layers: shapes, parameter counts against the closed form, transparency under GPipe."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import model_registry
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import batch_norm
from lingpipe.tasks.image import amoebanet
from lingpipe.tasks.image import resnet
import pipeline_test_util as util


def _Count(layer):
  return sum(v.shape.num_elements() for v in layer.trainable_variables)


@pytest.mark.parametrize('reduction,reduction_prev', [(False, False), (True, False), (False, True)])
def test_cell_shapes_meta_and_skip_state(reduction, reduction_prev):
  c_pp = 16 if reduction_prev else 32
  p = amoebanet.AmoebaCell.Params().Set(name='cell', channels_prev_prev=c_pp, channels_prev=24, channels=8,
                                        reduction=reduction, reduction_prev=reduction_prev)
  cell = p.Instantiate()
  size = 8
  inputs = NestedMap(x=tf.random.normal([2, size, size, 24]),
                     prev=tf.random.normal([2, size * 2 if reduction_prev else size, size * 2 if reduction_prev
                                            else size, c_pp]))
  out = cell.FProp(inputs)
  concat = amoebanet.REDUCTION_CONCAT if reduction else amoebanet.NORMAL_CONCAT
  side = size // 2 if reduction else size
  assert out.x.shape == (2, side, side, 8 * len(concat))
  np.testing.assert_array_equal(out.prev, inputs.x)  # The skip state is this cell's input.
  meta = amoebanet.AmoebaCell.FPropMeta(p, NestedMap(x=inputs.x.shape, prev=inputs.prev.shape))
  assert meta.out_shapes[0].x.as_list() == list(out.x.shape) and meta.flops > 0


def test_none_op_on_a_reduction_is_a_factorized_reduce_matching_numpy():
  layer = amoebanet.FactorizedReduce.Params().Set(name='fr', input_dim=3, output_dim=4).Instantiate()
  x = np.random.RandomState(0).normal(size=(1, 4, 4, 3)).astype(np.float32)
  out = layer.FProp(tf.constant(x)).numpy()
  r = np.maximum(x, 0)
  shifted = np.pad(r[:, 1:, 1:], [[0, 0], [0, 1], [0, 1], [0, 0]])
  a = r[:, ::2, ::2] @ layer.conv1.w.numpy()[0, 0]
  b = shifted[:, ::2, ::2] @ layer.conv2.w.numpy()[0, 0]
  ref = np.concatenate([a, b], -1)
  ref = (ref - 0.0) / np.sqrt(1.0 + 1e-3)  # Eval mode: moving mean 0, variance 1.
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('cells,filters', [(3, 8), (6, 16)])
def test_parameter_count_matches_the_closed_form(cells, filters):
  layers, dim = amoebanet.AmoebaNetLayers(cells, filters)
  net = util.Pair(layers, num_splits=1)[1]
  assert _Count(net) + dim * 10 + 10 == amoebanet.ParamCount(cells, filters, 10)


def test_paper_sizes_report_their_counts():
  assert model_registry.GetClass('image.cifar10.AmoebaNetD').ParamCount() == 666442
  assert model_registry.GetClass('image.cifar10.AmoebaNetD_18_256').ParamCount() == 117575178
  assert model_registry.GetClass('image.cifar10.AmoebaNetD_18_512').ParamCount() == 469801994
  # The paper-size networks' shapes chain through every layer (FPropMeta), without building the weights.
  p = model_registry.GetParams('image.cifar10.AmoebaNetD_18_512').task.network
  meta = p.cls.FPropMeta(p, tf.TensorShape([8, 32, 32, 3]))
  assert meta.out_shapes[0].as_list() == [8, 4 * 4 * 512] and meta.flops > 1e11


@pytest.mark.parametrize('k,m', [(1, 1), (2, 4), (4, 1), (4, 4)])  # (1, 4), (2, 1): in (4, 4), (4, 1).
def test_amoebanet_under_gpipe_matches_the_plain_network(k, m):
  # Batch norm on moving statistics, so micro-batches are normalized like the whole batch.
  layers, _ = amoebanet.AmoebaNetLayers(3, 8, batch_norm.BatchNormLayer.Params().Set(
      use_moving_stats_in_training=True))
  plain, pipe = util.Pair(layers, num_splits=k, num_micro_batches=m, remat='always')
  images = tf.constant(np.random.RandomState(0).normal(size=(4, 32, 32, 3)), tf.float32)
  util.AssertClose(util.LossAndGrads(plain, images), util.LossAndGrads(pipe, images))


def test_amoebanet_in_bfloat16_under_gpipe_matches_the_plain_bfloat16_network():
  import test_mixed_precision as mixed  # pylint: disable=g-import-not-at-top
  layers, dim = amoebanet.AmoebaNetLayers(3, 8, batch_norm.BatchNormLayer.Params().Set(
      use_moving_stats_in_training=True))
  plain, pipe = util.Pair(layers, fprop_dtype=tf.bfloat16, num_splits=2, num_micro_batches=2, remat='always')
  rng = np.random.RandomState(0)
  images = tf.constant(rng.normal(size=(4, 32, 32, 3)), tf.float32)
  targets = tf.constant(rng.normal(size=(4, dim)), tf.float32)
  mixed.AssertCloseInLowPrecision(mixed.Step(plain, images, targets), mixed.Step(pipe, images, targets))


def test_resnet_layers_and_errors():
  layers = resnet.ResNetLayers(8, 4)
  net = util.Pair(layers, num_splits=2, num_micro_batches=2)[1]
  with context.Training(True):
    assert net.FProp(tf.random.normal([4, 32, 32, 3])).shape == (4, 16)
  with pytest.raises(errors.ConfigError, match='depth must be 6n\\+2'):
    resnet.ResNetLayers(10)
  with pytest.raises(errors.ConfigError, match='multiple of 3'):
    amoebanet.AmoebaNetLayers(4, 16)
  cell = amoebanet.AmoebaCell.Params().Set(name='c', channels_prev_prev=8, channels_prev=8, channels=8).Instantiate()
  with pytest.raises(errors.ShapeError, match=r'inputs.x must have rank 4 and last dimension 8; got shape'):
    cell.FProp(NestedMap(x=tf.zeros([1, 4, 4, 3]), prev=tf.zeros([1, 4, 4, 8])))


def test_amoebanet_with_batch_statistics_is_exactly_transparent_in_float64_for_one_micro_batch():
  # With one micro-batch, batch-mode batch norm sees the whole batch, so plain and pipelined compute the same
  # function; float64 shows it is exact (float32 differs by ~2e-5 of the largest gradient: cancellation in batch
  # norm's backward).
  layers, _ = amoebanet.AmoebaNetLayers(3, 8)
  plain, pipe = util.Pair(layers, dtype=tf.float64, num_splits=2, num_micro_batches=1, remat='always')
  images = tf.constant(np.random.RandomState(0).normal(size=(4, 32, 32, 3)), tf.float64)
  for ref, act in zip(tf.nest.flatten(util.LossAndGrads(plain, images)),
                      tf.nest.flatten(util.LossAndGrads(pipe, images))):
    np.testing.assert_allclose(act, ref, rtol=1e-10, atol=1e-10 * float(np.abs(ref).max()))
