"""AmoebaNet-B and -D and ResNet layers: shapes, parameter counts against the reference's structure and the GPipe
paper, drop-path, transparency under GPipe."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import batch_norm
from lingpipe.model import model_registry
from lingpipe.tasks.image import amoebanet
from lingpipe.tasks.image import amoebanet_ops
from lingpipe.tasks.image import amoebanet_specs
from lingpipe.tasks.image import resnet
import pipeline_test_util as util


def _Count(layer):
  return sum(v.shape.num_elements() for v in layer.trainable_variables)


@pytest.mark.parametrize('genotype', ['B', 'D'])
@pytest.mark.parametrize('reduction,reduction_prev', [(False, False), (True, False), (False, True)])
def test_cell_shapes_meta_and_skip_state(genotype, reduction, reduction_prev):
  c_pp = 16 if reduction_prev else 32
  p = amoebanet.AmoebaCell.Params().Set(name='cell', genotype=genotype, channels_prev_prev=c_pp, channels_prev=24,
                                        channels=8, reduction=reduction, reduction_prev=reduction_prev)
  cell = p.Instantiate()
  size = 8
  inputs = NestedMap(x=tf.random.normal([2, size, size, 24]),
                     prev=tf.random.normal([2, size * 2 if reduction_prev else size, size * 2 if reduction_prev
                                            else size, c_pp]), aux_logits=tf.ones([2, 3]))
  out = cell.FProp(inputs)
  concat = amoebanet_specs.Cell(genotype, reduction).concat
  side = size // 2 if reduction else size
  assert out.x.shape == (2, side, side, 8 * len(concat))
  np.testing.assert_array_equal(out.prev, inputs.x)  # The skip state is this cell's input.
  np.testing.assert_array_equal(out.aux_logits, inputs.aux_logits)  # What travels with them, untouched.
  meta = amoebanet.AmoebaCell.FPropMeta(p, NestedMap(x=inputs.x.shape, prev=inputs.prev.shape,
                                                     aux_logits=inputs.aux_logits.shape))
  assert meta.out_shapes[0].x.as_list() == list(out.x.shape) and meta.flops > 0


def test_the_published_genotypes():
  """AmoebaNet-B and -D as in Real et al. 2019 (the reference's model_specs.py): B's normal cell adds separable
  convolutions to D's, and B's reduction cell concatenates two states, D's three."""
  normal_b, reduction_b = amoebanet_specs.GENOTYPES['B']
  normal_d, reduction_d = amoebanet_specs.GENOTYPES['D']
  assert normal_b.concat == normal_d.concat == (0, 3, 4, 6)
  assert reduction_b.concat == (5, 6) and reduction_d.concat == (4, 5, 6)
  assert normal_b.operations.count('separable_3x3_2') == 2 and 'separable_3x3_2' not in normal_d.operations
  assert normal_b.inputs == (1, 1, 1, 0, 1, 0, 2, 2, 1, 5) and normal_d.inputs == (1, 1, 1, 0, 0, 0, 2, 2, 1, 5)
  assert reduction_b.inputs == (0, 0, 2, 1, 2, 2, 3, 1, 4, 3) and reduction_d.inputs == (0, 0, 2, 1, 2, 2, 3, 1, 2, 3)
  assert amoebanet_specs.SeparableInfo('dil_2_separable_5x5_2') == (2, 5)


def test_the_factorized_reduction_of_a_larger_previous_state_matches_numpy():
  layer = amoebanet_ops.FactorizedReduce.Params().Set(name='fr', input_dim=3, output_dim=4).Instantiate()
  x = np.random.RandomState(0).normal(size=(1, 4, 4, 3)).astype(np.float32)
  out = layer.FProp(tf.constant(x)).numpy()
  r = np.maximum(x, 0)
  shifted = np.pad(r[:, 1:, 1:], [[0, 0], [0, 1], [0, 1], [0, 0]])
  a = r[:, ::2, ::2] @ layer.conv1.w.numpy()[0, 0]
  b = shifted[:, ::2, ::2] @ layer.conv2.w.numpy()[0, 0]
  ref = np.concatenate([a, b], -1)
  ref = (ref - 0.0) / np.sqrt(1.0 + 1e-3)  # Eval mode: moving mean 0, variance 1.
  np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('genotype,stem,image_size,cells,filters,aux_classes', [
    ('D', 'cifar', 32, 3, 8, 0), ('B', 'cifar', 32, 6, 16, 10), ('D', 'imagenet', 96, 6, 16, 7),
    ('B', 'imagenet', 96, 3, 16, 5)])
def test_parameter_count_matches_the_reference_structure(genotype, stem, image_size, cells, filters, aux_classes):
  """The layers against amoebanet_specs.ParamCount, written from the reference's code, not from the layers."""
  layers, dim = amoebanet.AmoebaNetLayers(cells, filters, genotype=genotype, stem=stem, image_size=image_size,
                                          num_classes=aux_classes)
  net = util.Pair(layers, num_splits=1)[1]
  classes = aux_classes or 10
  assert _Count(net) + dim * classes + classes == amoebanet_specs.ParamCount(
      genotype, cells, filters, classes, stem, image_size, aux_head=bool(aux_classes))


# The GPipe paper's sizes (its Table 1 for AmoebaNet-D at 224 x 224; Section 4 for AmoebaNet-B(18, 512) at 480 x
# 480), with the 1001 classes of the reference's ImageNet labels. Counts are without the auxiliary head (only
# training builds it) and must be within 2% or, for 1.8B, within the rounding of the two figures printed.
PAPER_SIZES = [('image.imagenet.AmoebaNetB_18_512', 557e6, 0.02), ('image.imagenet.AmoebaNetD_18_208', 82e6, 0.02),
               ('image.imagenet.AmoebaNetD_18_416', 318e6, 0.02), ('image.imagenet.AmoebaNetD_18_544', 542e6, 0.02),
               ('image.imagenet.AmoebaNetD_36_544', 1.05e9, 0.02),
               ('image.imagenet.AmoebaNetD_72_512', 1.8e9, 0.05 / 1.8)]


@pytest.mark.parametrize('name,paper,tolerance', PAPER_SIZES)
def test_registered_imagenet_models_have_the_papers_sizes(name, paper, tolerance):
  cls = model_registry.GetClass(name)
  count = amoebanet_specs.ParamCount(cls.GENOTYPE, cls.NUM_CELLS, cls.FILTERS, cls.NUM_CLASSES, 'imagenet',
                                     cls.IMAGE_SIZE, aux_head=False)
  assert abs(count / paper - 1) <= tolerance, (name, count)
  assert cls.ParamCount() > count  # With the auxiliary head, as trained.


def test_paper_sizes_report_their_counts():
  assert model_registry.GetClass('image.cifar10.AmoebaNetD').ParamCount() == 684938
  assert model_registry.GetClass('image.cifar10.AmoebaNetD_18_256').ParamCount() == 118640650
  assert model_registry.GetClass('image.cifar10.AmoebaNetD_18_512').ParamCount() == 474030090
  assert model_registry.GetClass('image.imagenet.AmoebaNetB_18_512').ParamCount() == 559072194
  # The paper-size networks' shapes chain through every layer (FPropMeta), without building the weights.
  p = model_registry.GetParams('image.imagenet.AmoebaNetB_18_512').task.network
  meta = p.cls.FPropMeta(p, tf.TensorShape([8, 480, 480, 3]))
  assert meta.out_shapes[0].features.as_list() == [8, 4 * 4 * 512] and meta.flops > 1e12
  assert meta.out_shapes[0].aux_logits.as_list() == [8, 1001]


def test_drop_path_drops_whole_examples_on_a_schedule_and_redraws_them_alike():
  layer = amoebanet_ops.DropPath.Params().Set(name='dp', keep_prob=0.5, burn_in_steps=100).Instantiate()
  x = tf.ones([64, 2, 2, 3])
  with context.Training(False):
    np.testing.assert_array_equal(layer.FProp(x), x)
  with context.Training(True), context.StepSeed(tf.constant(0, tf.int64)):
    np.testing.assert_array_equal(layer.FProp(x), x)  # Step 0 of the burn-in: keep 1.
  with context.Training(True), context.StepSeed(tf.constant(100, tf.int64)):
    first, again = layer.FProp(x).numpy(), layer.FProp(x).numpy()
  np.testing.assert_array_equal(first, again)  # A re-computation drops the same examples.
  per_example = first.reshape(64, -1)
  assert set(np.unique(per_example)) <= {0.0, 2.0} and (per_example == per_example[:, :1]).all()
  assert 16 <= (per_example[:, 0] == 0).sum() <= 48  # About half, at keep 0.5.
  with context.Training(True), context.StepSeed(tf.constant(101, tf.int64)):
    assert not np.array_equal(layer.FProp(x).numpy(), first)  # A new step, new examples.


@pytest.mark.slow
def test_drop_path_and_dense_dropout_are_transparent_under_gpipe_with_recomputation():
  """AmoebaNet-B with drop-path (mid burn-in), the auxiliary head and dense dropout: K=2 re-computing cells give
  the loss and gradients of one cell storing its activations, at the same M (the masks depend on the micro-batch,
  not on the cells or the re-computation)."""
  layers, _ = amoebanet.AmoebaNetLayers(
      3, 8, batch_norm.BatchNormLayer.Params().Set(use_moving_stats_in_training=True), genotype='B', num_classes=4,
      drop_path_keep_prob=0.6, drop_path_burn_in_steps=10, dense_dropout_keep_prob=0.5, image_size=16)
  one = util.Pair(layers, num_splits=1, num_micro_batches=2, remat='never')[1]
  two = util.Pair(layers, num_splits=2, num_micro_batches=2, remat='always')[1]
  for a, b in zip(one.trainable_variables, two.trainable_variables):
    b.assign(a)
  images = tf.constant(np.random.RandomState(0).normal(size=(4, 16, 16, 3)), tf.float32)  # Aux head: 4x4 left.
  step = tf.Variable(5, dtype=tf.int64)  # As the trainer's global step: the traced cells read its value.
  reference = util.LossAndGrads(one, images, step=step)
  util.AssertClose(reference, util.LossAndGrads(two, images, step=step))
  step.assign(6)
  assert not np.allclose(reference[0], util.LossAndGrads(one, images, step=step)[0])  # New step, new masks.


@pytest.mark.parametrize('k,m', [(1, 1), (2, 4), (4, 1), (4, 4)])  # (1, 4), (2, 1): in (4, 4), (4, 1).
@pytest.mark.slow
def test_amoebanet_under_gpipe_matches_the_plain_network(k, m):
  # Batch norm on moving statistics, so micro-batches are normalized like the whole batch.
  layers, _ = amoebanet.AmoebaNetLayers(3, 8, batch_norm.BatchNormLayer.Params().Set(
      use_moving_stats_in_training=True))
  plain, pipe = util.Pair(layers, num_splits=k, num_micro_batches=m, remat='always')
  images = tf.constant(np.random.RandomState(0).normal(size=(4, 32, 32, 3)), tf.float32)
  util.AssertClose(util.LossAndGrads(plain, images), util.LossAndGrads(pipe, images))


@pytest.mark.slow
def test_amoebanet_in_bfloat16_under_gpipe_matches_the_plain_bfloat16_network():
  import test_mixed_precision as mixed  # pylint: disable=g-import-not-at-top
  layers, dim = amoebanet.AmoebaNetLayers(3, 8, batch_norm.BatchNormLayer.Params().Set(
      use_moving_stats_in_training=True))
  plain, pipe = util.Pair(layers, fprop_dtype=tf.bfloat16, num_splits=2, num_micro_batches=2, remat='always')
  rng = np.random.RandomState(0)
  images = tf.constant(rng.normal(size=(4, 32, 32, 3)), tf.float32)
  targets = tf.constant(rng.normal(size=(4, dim)), tf.float32)
  float32 = mixed.Step(util.Pair(layers, num_splits=2, num_micro_batches=2, remat='always')[0], images, targets)
  mixed.AssertCloseInLowPrecision(mixed.Step(plain, images, targets), mixed.Step(pipe, images, targets),
                                  float32=float32)


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


@pytest.mark.slow
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
