"""PipeliningLayer: transparency against the plain model, batch norm, placement, tracing, errors."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.layers import batch_norm
from lingpipe.layers import dropout
from lingpipe.layers import linear
from lingpipe.layers import sequential
import pipeline_test_util as util


def _Input(batch=8, dim=8, seed=1):
  return tf.constant(np.random.RandomState(seed).normal(size=(batch, dim)).astype(np.float32))


@pytest.mark.parametrize('k', [1, 2, 3, 4])
@pytest.mark.parametrize('m', [1, 2, 4, 8])
def test_transparency_across_splits_and_micro_batches(k, m):
  # 5 layers: not divisible by 2, 3 or 4.
  plain, pipe = util.Pair(util.Tanh(5), num_splits=k, num_micro_batches=m, remat='always')
  x = _Input()
  loss, grads, input_grads = util.LossAndGrads(plain, x)
  p_loss, p_grads, p_input_grads = util.LossAndGrads(pipe, x)
  util.AssertClose(loss, p_loss)
  util.AssertClose(grads, p_grads)
  util.AssertClose(input_grads, p_input_grads)


def test_without_loops_the_passes_unroll_with_the_same_gradients():
  """loop_phases=False (for pipelines across processes, where each loop iteration costs a round trip): every
  (micro-batch, cell) task is its own call, and the step computes what the looped one does."""
  counts = {}
  for m in (4, 8):
    _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=m, loop_phases=False)
    counts[m] = util.CellCalls(util.StepGraph(pipe, _Input(batch=32)))
  # Every (micro-batch, cell) task of both passes is its own call, 2 x M x K; looped, a constant number
  # (tests/regression/test_graph_structure.py).
  assert counts == {4: 16, 8: 32}
  x = _Input(batch=16)
  plain, looped = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=8)
  _, unrolled = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=8, loop_phases=False)
  unrolled_result = util.LossAndGrads(unrolled, x)
  util.AssertClose(util.LossAndGrads(looped, x), unrolled_result)
  util.AssertClose(util.LossAndGrads(plain, x), unrolled_result)


@pytest.mark.parametrize('policy', schedule_lib.REMAT_POLICIES)
def test_transparency_for_every_remat_policy_with_nested_map_skip_fields(policy):
  layers = [util.SkipProjection.Params().Set(dim=4) for _ in range(6)]
  plain, pipe = util.Pair(layers, num_splits=3, num_micro_batches=4, remat=policy)
  rng = np.random.RandomState(3)
  inputs = NestedMap(x=tf.constant(rng.normal(size=(8, 4)), tf.float32),
                     skip=tf.constant(rng.normal(size=(8, 4)), tf.float32),
                     mask=tf.constant([1, 0, 1, 1, 1, 0, 1, 1], tf.int32))
  reference = util.LossAndGrads(plain, inputs)
  util.AssertClose(reference, util.LossAndGrads(pipe, inputs))


def test_pad_policy_is_transparent():
  plain, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=4, pad=True)
  x = _Input(batch=6)
  util.AssertClose(util.LossAndGrads(plain, x), util.LossAndGrads(pipe, x))


def test_float64_transparency_is_exact_to_1e_12():
  plain, pipe = util.Pair(util.Tanh(6, dtype=tf.float64), dtype=tf.float64, num_splits=4, num_micro_batches=8)
  x = tf.cast(_Input(batch=16), tf.float64)
  for ref, act in zip(tf.nest.flatten(util.LossAndGrads(plain, x)), tf.nest.flatten(util.LossAndGrads(pipe, x))):
    np.testing.assert_allclose(act, ref, rtol=1e-12, atol=1e-14)


def test_eval_and_export_forward_match_plain():
  plain, pipe = util.Pair(util.Tanh(3), num_splits=3, num_micro_batches=2)
  x = _Input(batch=7)  # Not divisible by 2: evaluation pads.
  np.testing.assert_allclose(pipe.FProp(x), plain.FProp(x), rtol=1e-5, atol=1e-6)
  with context.Exporting():
    np.testing.assert_allclose(pipe.FProp(x), plain.FProp(x), rtol=1e-5, atol=1e-6)


def test_deterministic_dropout_is_reproduced_by_the_recompute():
  layers = util.Tanh(2) + [dropout.DropoutLayer.Params().Set(keep_prob=0.5, deterministic=True)] + util.Tanh(2)
  x = _Input()
  # One micro-batch draws exactly the plain model's masks.
  plain, pipe = util.Pair(layers, num_splits=2, num_micro_batches=1, remat='always')
  util.AssertClose(util.LossAndGrads(plain, x, step=5), util.LossAndGrads(pipe, x, step=5))
  # With 4 micro-batches, re-computing (always) and storing (never) the forward see the same masks.
  _, recomputed = util.Pair(layers, num_splits=2, num_micro_batches=4, remat='always')
  _, stored = util.Pair(layers, num_splits=2, num_micro_batches=4, remat='never')
  util.AssertClose(util.LossAndGrads(stored, x, step=5), util.LossAndGrads(recomputed, x, step=5))
  # Re-computed layer by layer, in the backward, outside the forward's blocks: the same masks again.
  _, by_layer = util.Pair(layers, num_splits=2, num_micro_batches=4, remat='per_layer')
  util.AssertClose(util.LossAndGrads(stored, x, step=5), util.LossAndGrads(by_layer, x, step=5))


class _PerMicroBatch:
  """The plain layer applied to each part of the batch on its own (how GPipe's batch norm sees micro-batches)."""

  def __init__(self, layer, sizes, batch_dim=0):
    self.layer, self.sizes, self.batch_dim = layer, sizes, batch_dim

  @property
  def trainable_variables(self):
    return self.layer.trainable_variables

  def FProp(self, x):
    return tf.concat([self.layer.FProp(part) for part in tf.split(x, self.sizes, self.batch_dim)], self.batch_dim)


def _BatchNormStack(decay):
  # No bias before batch norm: its gradient is zero in exact arithmetic, so two float results differ by noise only.
  return [linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8, has_bias=False),
          batch_norm.BatchNormLayer.Params().Set(dim=8, decay=decay),
          linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8)]


def _ResetAverages(*bns):
  for bn in bns:
    bn.moving_mean.assign(tf.zeros_like(bn.moving_mean))
    bn.moving_variance.assign(tf.ones_like(bn.moving_variance))


@pytest.mark.parametrize('policy', ['always', 'never', 'per_layer'])
def test_batch_norm_normalizes_micro_batches_and_updates_averages_once_from_the_whole_batch(policy):
  plain, pipe = util.Pair(_BatchNormStack(decay=0.9), num_splits=2, num_micro_batches=4, remat=policy)
  x = _Input(batch=16)
  # Loss and every gradient: those of the plain model run on each micro-batch on its own.
  reference = util.LossAndGrads(_PerMicroBatch(plain, [4] * 4), x)
  _ResetAverages(plain.sub[1], pipe.units[1])
  util.AssertClose(reference, util.LossAndGrads(pipe, x))  # One training step, forward and backward.
  # The averages moved once, by the whole batch's moments: as one plain step on the whole batch moves them.
  with context.Training(True):
    plain.FProp(x)
  for name in ('moving_mean', 'moving_variance'):
    np.testing.assert_allclose(getattr(pipe.units[1], name).numpy(), getattr(plain.sub[1], name).numpy(),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('batch', [6, 7])
def test_batch_norm_leaves_pad_rows_out_of_every_statistic(batch):
  # Real rows are centred on 5 and pad rows are zeros: a statistic that counts pad rows is pulled towards 0.
  plain, pipe = util.Pair(_BatchNormStack(decay=0.0), num_splits=2, num_micro_batches=4, pad=True)
  x = _Input(batch=batch) + 5.0  # Padded to 8: micro-batches of 2, 2, 2 and 0 (or 1) real rows.
  sizes = [2, 2, 2] + ([batch - 6] if batch > 6 else [])
  reference = util.LossAndGrads(_PerMicroBatch(plain, sizes), x)
  util.AssertClose(reference, util.LossAndGrads(pipe, x))
  with context.Training(True):
    plain.FProp(x)  # decay 0: the averages become the real rows' moments.
  for name in ('moving_mean', 'moving_variance'):
    np.testing.assert_allclose(getattr(pipe.units[1], name).numpy(), getattr(plain.sub[1], name).numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('pad', [False, True])
def test_transparency_along_batch_dim_1_with_batch_norm(pad):
  """Time-major inputs [T, B, D]: splitting, merging, the output gradients and the pad rows all along dim 1."""
  batch = 6 if pad else 8
  plain, pipe = util.Pair(_BatchNormStack(decay=0.0), num_splits=2, num_micro_batches=4, batch_dim=1, pad=pad,
                          remat='always')
  x = tf.constant(np.random.RandomState(4).normal(size=(3, batch, 8)) + 5.0, tf.float32)
  reference = util.LossAndGrads(_PerMicroBatch(plain, [2] * (batch // 2), batch_dim=1), x)
  util.AssertClose(reference, util.LossAndGrads(pipe, x))
  with context.Training(True):
    plain.FProp(x)
  np.testing.assert_allclose(pipe.units[1].moving_mean.numpy(), plain.sub[1].moving_mean.numpy(), rtol=1e-5,
                             atol=1e-5)


@pytest.mark.parametrize('policy', ['always', 'never'])
def test_transparency_along_batch_dim_1_and_with_micro_batch_size(policy):
  x = tf.constant(np.random.RandomState(5).normal(size=(3, 8, 8)), tf.float32)
  plain, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=4, batch_dim=1, remat=policy)
  util.AssertClose(util.LossAndGrads(plain, x), util.LossAndGrads(pipe, x))
  plain, pipe = util.Pair(util.Tanh(4), num_splits=2, micro_batch_size=2, remat=policy)
  util.AssertClose(util.LossAndGrads(plain, x[0]), util.LossAndGrads(pipe, x[0]))
  assert pipe.NumMicroBatches(x[0]) == 4
  with pytest.raises(errors.ConfigError, match='batch size 6 is not a multiple of micro_batch_size 4'):
    util.Pair(util.Tanh(4), num_splits=2, micro_batch_size=4)[1].FProp(x[0, :6])


def test_assert_close_compares_structures_not_just_common_prefixes():
  util.AssertClose([1.0, [2.0, 3.0]], [1.0, [2.0, 3.0]])
  for shorter_or_other in ([1.0, [2.0]], [1.0, 2.0, 3.0], [1.0, [2.0, 3.5]]):
    with pytest.raises(AssertionError):
      util.AssertClose([1.0, [2.0, 3.0]], shorter_or_other)


def test_cell_variables_and_gradients_live_on_their_devices():
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=2)
  assert [v.device.endswith('CPU:%d' % (i // 4)) for i, v in enumerate(pipe.trainable_variables)] == [True] * 8
  graph_def = util.StepGraph(pipe, _Input())
  devices = {}
  for function in graph_def.library.function:
    # The layers' work: their MatMuls, or the calls of the function their kind shares (layer_functions.py).
    matmul_devices = {n.device for n in function.node_def
                      if n.op == 'MatMul' or (n.op.endswith('PartitionedCall') and 'Body' in n.attr['f'].func.name)}
    if matmul_devices and 'Step' in function.signature.name:  # The re-computing backward functions.
      assert len(matmul_devices) == 1, matmul_devices
      devices[function.signature.name] = matmul_devices.pop()
  # Per cell one trace, the accumulating backward; each cell's last micro-batch keeps its activations, as its
  # backward comes next on its device (schedule.KeepWhereBackwardFollows), and is differentiated through its tape.
  assert sorted(d[-5:] for d in devices.values()) == ['CPU:0', 'CPU:1'], devices


def test_each_cell_is_traced_once_whatever_the_number_of_micro_batches():
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=8)
  util.LossAndGrads(pipe, _Input(batch=16))
  for key, fn in pipe.functions.cache.items():  # A cell's first backward is taped (schedule.KeepWhereBackwardFollows).
    assert fn.experimental_get_tracing_count() == 1, key


def test_errors():
  x = _Input(batch=6)
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=4)
  with pytest.raises(errors.ConfigError, match='Batch size 6 is not divisible by num_micro_batches 4'):
    util.LossAndGrads(pipe, x)
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=8)
  with pytest.raises(errors.ConfigError, match='num_micro_batches 8 is larger than the batch size 6'):
    util.LossAndGrads(pipe, x)
  with pytest.raises(errors.ConfigError, match='num_splits 5 is larger than the number of layers 4'):
    util.Pair(util.Tanh(4), num_splits=5)
  with pytest.raises(errors.ConfigError,
                     match=r"remat must be one of always, except_last, never, per_layer, got 'alway'"):
    util.Pair(util.Tanh(4), remat='alway')
  with pytest.raises(errors.ConfigError, match='set exactly one of cell_tpl'):
    pipelining_layer.PipeliningLayer.Params().Set(name='p').Instantiate()
  with pytest.raises(errors.ConfigError, match='The pipeline has 3 splits but only 2 devices'):
    util.Pair(util.Tanh(4), num_splits=3, devices=['/device:CPU:0', '/device:CPU:1'])
  layers = [util.SkipProjection.Params().Set(dim=4), util.Rename.Params(), util.SkipProjection.Params().Set(dim=4)]
  _, pipe = util.Pair(layers, num_splits=3, balance=[1, 1, 1])
  inputs = NestedMap(x=tf.ones([2, 4]), skip=tf.ones([2, 4]), mask=tf.ones([2], tf.int32))
  with pytest.raises(errors.ConfigError) as e:
    util.LossAndGrads(pipe, inputs)
  assert str(e.value).startswith("Cell 2 (net/sub_2) cannot use the output of cell 1 (net/sub_1): "
                                 "NestedMap has no field 'mask'; it has: h.")


def test_cell_tpl_gives_one_cell_per_params():
  cells = [sequential_params(util.Tanh(2)), sequential_params(util.Tanh(3))]
  pipe = pipelining_layer.PipeliningLayer.Params().Set(name='net', cell_tpl=cells, num_micro_batches=2).Instantiate()
  plain = sequential.SequentialLayer.Params().Set(name='net', sub=[c.Copy() for c in cells]).Instantiate()
  for a, b in zip(plain.trainable_variables, pipe.trainable_variables):
    b.assign(a)
  assert pipe.num_cells == 2 and [layer.path for layer in pipe.units] == ['net/cell_0', 'net/cell_1']
  assert pipe.CellVariables(1)[0].device.endswith('CPU:1')
  x = _Input()
  util.AssertClose(util.LossAndGrads(plain, x), util.LossAndGrads(pipe, x))


def sequential_params(layers):
  return sequential.SequentialLayer.Params().Set(sub=layers)


@pytest.mark.parametrize('k,m', [(2, 5), (3, 8), (4, 9)])
def test_never_keeps_what_each_backward_reads_on_a_stack_and_matches_plain(k, m):
  """The looped forwards push what their backward reads, the backwards pop it last in, first out, and the
  unrolled ones keep theirs by micro-batch (saved_stack.Pushed): the gradients are the plain model's for odd M too,
  with the loop or without."""
  x = _Input(batch=2 * m)
  plain, looped = util.Pair(util.Tanh(5), num_splits=k, num_micro_batches=m, remat='never')
  _, unrolled = util.Pair(util.Tanh(5), num_splits=k, num_micro_batches=m, remat='never', loop_phases=False)
  reference = util.LossAndGrads(plain, x)
  util.AssertClose(reference, util.LossAndGrads(looped, x))
  util.AssertClose(reference, util.LossAndGrads(unrolled, x))


@pytest.mark.parametrize('policy', ['always', 'except_last', 'never'])
def test_one_cell_and_one_micro_batch_run_the_plain_model_under_any_policy(policy):
  _, pipe = util.Pair(util.Tanh(4), num_splits=1, num_micro_batches=1, remat=policy)
  # Re-computing the only task would hold the same activations at the same moment, only later.
  assert util.CellCalls(util.StepGraph(pipe, _Input())) == 0
