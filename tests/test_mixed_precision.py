"""fprop_dtype: layers compute in bfloat16 (or float16) on float32 master weights, and the pipeline carries the
compute dtype; a pipelined bfloat16 model matches the plain bfloat16 model for any K, M, schedule and remat."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import cpu_kernels
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.layers import batch_norm
from lingpipe.layers import dropout
from lingpipe.layers import layer_norm
from lingpipe.layers import linear
from lingpipe.layers import sequential
from lingpipe.layers import transformer
import pipeline_test_util as util

SCHEDULES = ('gpipe', '1f1b', 'interleaved_1f1b', 'zero_bubble')
REMATS = ('always', 'except_last', 'never', 'per_layer')


def _Dense(dim=8, per_micro_batch=True):
  """Eight layers; with `per_micro_batch`, batch norm and dropout, which a pipeline runs on each micro-batch (its
  statistics and masks are the micro-batch's, so the reference is a one-cell pipeline of as many micro-batches)."""
  # No bias before batch norm: its gradient is zero up to rounding, and relative to nothing.
  return [linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim, activation='tanh',
                                              has_bias=not per_micro_batch)] + ([
      batch_norm.BatchNormLayer.Params().Set(dim=dim, decay=0.5),
      dropout.DropoutLayer.Params().Set(keep_prob=0.8, deterministic=True)] if per_micro_batch else []) + [
          linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim, activation='relu'),
          layer_norm.LayerNormLayer.Params().Set(dim=dim),
          linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim, activation='tanh'),
          linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim),
          linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim, activation='tanh')]


def _SquaredError(outputs, targets):
  """Row-weighted mean squared error, in float32 whatever the outputs' dtype."""
  x = tf.cast(outputs.x if isinstance(outputs, dict) else outputs, tf.float32)
  rows = tf.cast(tf.shape(x)[0], tf.float32)
  loss = tf.reduce_sum(tf.square(x - targets)) / rows
  return loss, {'loss': (loss, rows)}


def Step(layer, x, targets, with_loss=False):
  """(loss, variable gradients) of a training step with a float32 squared error (test_amoebanet.py uses it)."""
  loss, _, grads, _ = util.LossStep(layer, x, targets, _SquaredError, with_loss, step=5)
  return loss, grads


def AssertCloseInLowPrecision(reference, actual, loss_rtol=1e-3, grad_rtol=2e-2, each_rtol=6e-2, float32=None):
  """bfloat16 transparency: losses within loss_rtol relative; the gradients (all variables') within grad_rtol of
  their norm, and each variable's within each_rtol of its own (a sum that cancels, as a bias gradient, keeps
  bfloat16's absolute error and so a larger relative one). Given the float32 step `float32`, a variable's gradient
  also passes if it is no farther from the float32 one than the reference's is (times 1.5): Eigen's bfloat16 kernels
  (a CPU without AVX-512) round more than oneDNN's, differently for a micro-batch than for the whole batch."""
  (ref_loss, ref_grads), (loss, grads) = reference, actual
  np.testing.assert_allclose(float(loss), float(ref_loss), rtol=loss_rtol)
  assert len(grads) == len(ref_grads)
  assert all(a.dtype == r.dtype == tf.float32 for a, r in zip(grads, ref_grads))
  ref = [np.asarray(g) for g in ref_grads]
  diff = [np.asarray(a) - r for a, r in zip(grads, ref)]
  assert _Norm(diff) <= grad_rtol * _Norm(ref), (_Norm(diff), _Norm(ref))
  exact = [np.asarray(g) for g in float32[1]] if float32 is not None else [None] * len(ref)
  for a, d, r, f in zip(grads, diff, ref, exact):
    if f is not None and _Norm([np.asarray(a) - f]) <= 1.5 * _Norm([r - f]):
      continue
    assert _Norm([d]) <= each_rtol * _Norm([r]) + 1e-6, (_Norm([d]), _Norm([r]))


def _Norm(arrays):
  return float(np.sqrt(sum(np.sum(np.square(a)) for a in arrays)))


def _RandomCases(n, seed=72):
  rng = np.random.RandomState(seed)
  cases = []
  for _ in range(n):
    name = SCHEDULES[rng.randint(len(SCHEDULES))]
    k = int(rng.randint(1, 5))
    v = 2 if name == 'interleaved_1f1b' else 1
    m = int(rng.choice([1, 2, 3, 4, 8]))
    if name in ('1f1b', 'interleaved_1f1b', 'zero_bubble') and m < k:
      m = k
    cases.append((name, k, m, REMATS[rng.randint(len(REMATS))], v))
  return cases


@pytest.mark.parametrize('name,k,m,remat,v', _RandomCases(6))
@pytest.mark.slow
def test_bfloat16_pipeline_matches_the_plain_bfloat16_model(name, k, m, remat, v):
  rng = np.random.RandomState(k * 10 + m)
  x = tf.constant(rng.normal(size=(8 * m, 8)), tf.float32)
  targets = tf.constant(rng.normal(size=(8 * m, 8)), tf.float32)
  plain, pipe = util.Pair(_Dense(per_micro_batch=False), fprop_dtype=tf.bfloat16, num_splits=k,
                          num_micro_batches=m, remat=remat, schedule=name, virtual_stages=v)
  AssertCloseInLowPrecision(Step(plain, x, targets, False), Step(pipe, x, targets, pipe.NeedsLoss()))
  # With batch norm and dropout: against one cell of M micro-batches (the same statistics and masks).
  _, one_cell = util.Pair(_Dense(), fprop_dtype=tf.bfloat16, num_splits=1, num_micro_batches=m)
  _, pipe = util.Pair(_Dense(), fprop_dtype=tf.bfloat16, num_splits=k, num_micro_batches=m, remat=remat,
                      schedule=name, virtual_stages=v)
  AssertCloseInLowPrecision(Step(one_cell, x, targets, False), Step(pipe, x, targets, pipe.NeedsLoss()))
  # Batch norm moved its float32 averages by the same moments.
  assert pipe.units[1].moving_mean.dtype == tf.float32
  np.testing.assert_allclose(pipe.units[1].moving_mean.numpy(), one_cell.units[1].moving_mean.numpy(),
                             rtol=1e-2, atol=1e-3)


def test_the_random_cases_cover_every_schedule_and_policy():
  cases = _RandomCases(6)
  assert {name for name, k, m, _, _ in cases if k > 1 and m > 1} == set(SCHEDULES)
  assert {remat for _, _, _, remat, _ in cases} == set(REMATS)


@pytest.mark.parametrize('remat', ['always', 'never', 'per_layer'])  # except_last: in the random cases above.
@pytest.mark.slow
def test_bfloat16_transformer_pipeline_with_nested_map_fields(remat):
  block = transformer.TransformerLayer.Params().Set(model_dim=8, hidden_dim=16, num_heads=2)
  plain, pipe = util.Pair([block.Copy() for _ in range(4)], fprop_dtype=tf.bfloat16, num_splits=2,
                          num_micro_batches=4, remat=remat)
  rng = np.random.RandomState(7)
  paddings = np.zeros((8, 5), np.float32)
  paddings[::3, 3:] = 1.0
  inputs = NestedMap(x=tf.constant(rng.normal(size=(8, 5, 8)), tf.float32), paddings=tf.constant(paddings))
  targets = tf.constant(rng.normal(size=(8, 5, 8)), tf.float32)
  AssertCloseInLowPrecision(Step(plain, inputs, targets, False), Step(pipe, inputs, targets, False))


def test_float32_is_unchanged_by_fprop_dtype_none():
  plain, pipe = util.Pair(_Dense(per_micro_batch=False), fprop_dtype=None, num_splits=2, num_micro_batches=4)
  rng = np.random.RandomState(3)
  x = tf.constant(rng.normal(size=(16, 8)), tf.float32)
  targets = tf.constant(rng.normal(size=(16, 8)), tf.float32)
  util.AssertClose(Step(plain, x, targets, False), Step(pipe, x, targets, False))


@pytest.mark.slow
def test_activations_and_hand_offs_are_bfloat16_and_master_weights_float32():
  _, pipe = util.Pair(_Dense(), fprop_dtype='bfloat16', num_splits=2, num_micro_batches=4, remat='never')
  assert pipe.fprop_dtype == tf.bfloat16 and all(u.fprop_dtype == tf.bfloat16 for u in pipe.units)
  assert all(v.dtype == tf.float32 for v in pipe.variables)
  _, float32_pipe = util.Pair(_Dense(), num_splits=2, num_micro_batches=4)
  assert [v.name for v in pipe.variables] == [v.name for v in float32_pipe.variables]  # Checkpoints unchanged.
  x = tf.constant(np.ones((16, 8)), tf.bfloat16)
  with context.Training(False):
    assert pipe.FProp(x).dtype == tf.bfloat16
  graph = util.StepGraph(pipe, x)
  # Each weight is cast to bfloat16 once per step (on its cell's device), not once per micro-batch: the casts of
  # variable reads are in the step's own graph, one per computing weight (batch norm and layer norm keep theirs).
  reads = {n.name for n in graph.node if n.op == 'ReadVariableOp'}
  casts = [n for n in graph.node if n.op == 'Cast' and n.input[0].split(':')[0] in reads]
  assert len(casts) == 9, [n.name for n in casts]  # 5 projections' w and 4 b (the first has none).
  # Hand-offs: every cell function's float inputs are bfloat16 activations or weights, or float32 norms' weights.
  dtypes = {a.type for f in graph.library.function if 'Cell' in f.signature.name for a in f.signature.input_arg}
  assert tf.bfloat16.as_datatype_enum in dtypes


def test_fprop_dtype_is_inherited_checked_and_kept_where_set():
  p = sequential.SequentialLayer.Params().Set(name='net', fprop_dtype='bfloat16', sub=[
      linear.ProjectionLayer.Params().Set(input_dim=2, output_dim=2),
      linear.ProjectionLayer.Params().Set(input_dim=2, output_dim=2, fprop_dtype=tf.float32)])
  assert p.fprop_dtype == tf.bfloat16  # The name is stored as the dtype.
  net = p.Instantiate()
  assert [s.fprop_dtype for s in net.sub] == [tf.bfloat16, tf.float32]
  assert net.sub[0].theta.w.dtype == tf.bfloat16 and net.sub[0].w.dtype == tf.float32
  assert net.FProp(tf.ones([3, 2])).dtype == tf.float32  # The second layer casts its input back.
  with pytest.raises(errors.ConfigError, match=r"fprop_dtype: 'bflot16' is not allowed; expected None or a "
                     r"floating-point dtype"):
    p.fprop_dtype = 'bflot16'
  with pytest.raises(errors.ConfigError, match='fprop_dtype'):
    p.fprop_dtype = tf.int32
  q = linear.ProjectionLayer.Params().Set(fprop_dtype='bfloat16')
  r = linear.ProjectionLayer.Params()
  r.FromText(q.ToText())
  assert r.fprop_dtype == tf.bfloat16 and 'fprop_dtype' in q.ToText()
  r.FromText("fprop_dtype : 'float16'")  # As --model_params_override writes it.
  assert r.fprop_dtype == tf.float16


def test_layers_compute_what_needs_the_range_in_float32():
  ln = layer_norm.LayerNormLayer.Params().Set(name='ln', dim=4, fprop_dtype=tf.bfloat16).Instantiate()
  x = tf.constant([[1000.0, 1000.5, 999.5, 1000.25]], tf.bfloat16)
  out = ln.FProp(x)
  assert out.dtype == tf.bfloat16
  ref = layer_norm.LayerNormLayer.Params().Set(name='ln', dim=4).Instantiate().FProp(tf.cast(x, tf.float32))
  np.testing.assert_allclose(tf.cast(out, tf.float32), ref, atol=2e-2)
  assert base_layer.ToDtype(NestedMap(a=x, i=tf.constant([1])), tf.float32).i.dtype == tf.int32


def _Mlp(n, dim):
  return [linear.ProjectionLayer.Params().Set(input_dim=dim, output_dim=dim, activation='tanh') for _ in range(n)]


@pytest.mark.slow
def test_bfloat16_halves_the_stash_and_the_planner_predicts_it():
  """One step, K=2, M=8, remat never, measured by the allocator: the stash and hand-offs are bfloat16 (the step's
  peak falls to about 0.6 of float32's: the float32 gradient sums and the weights' bfloat16 copies stay), and the
  planner's prediction stays within 25% of the fullest step's peak in both dtypes (benchmarks/pipeline_benchmark.py
  --sections=precision prints the ratios)."""
  from lingpipe.core import memory_stats  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  n, dim, batch, m = 16, 256, 2048, 8
  measured, predicted = {}, {}
  for dtype in (tf.float32, tf.bfloat16):
    pipe = pipelining_layer.PipeliningLayer.Params().Set(
        name='mem_%s' % dtype.name, layers=_Mlp(n, dim), num_splits=2, num_micro_batches=m, remat='never',
        fprop_dtype=dtype).Instantiate()
    x = tf.cast(tf.constant(np.random.RandomState(0).normal(size=(batch, dim)), tf.float32), dtype)

    @tf.function(autograph=False)
    def TrainStep(inputs, pipe=pipe):
      with tf.GradientTape() as tape, context.Training(True):
        loss = tf.reduce_mean(tf.square(tf.cast(pipe.FProp(inputs), tf.float32)))
      return tape.gradient(loss, pipe.trainable_variables)

    TrainStep(x)
    # The fullest of 8 steps: a step's peak depends on how the runtime's threads interleave the two devices.
    measured[dtype] = max(memory_stats.PeakBytes(lambda: tf.nest.map_structure(lambda t: t.numpy(), TrainStep(x)),
                                                 'CPU:0') for _ in range(8))
    layers = memory_plan.DescribeLayers(_Mlp(n, dim), [batch, dim], fprop_dtype=dtype)
    cells = memory_plan.CellMemories(layers, [n // 2] * 2, m, 'never')
    predicted[dtype] = memory_plan.StepBytes(cells)
    assert 0.8 <= predicted[dtype] / measured[dtype] <= 1.25, (dtype, predicted[dtype] / 2**20,
                                                               measured[dtype] / 2**20)
  if not cpu_kernels.OneDnnRunsBfloat16():
    # Eigen's bfloat16 kernels (no AVX-512) compute through float32 copies of their operands, which raise the peak
    # (0.66 of float32's on an AMD EPYC without AVX-512); the planner's check above still holds for the stash.
    return
  assert measured[tf.bfloat16] <= 0.65 * measured[tf.float32], measured
  weights = sum(layers.params) * 4
  # What is left once the float32 gradients (as large as the weights) and the bfloat16 copies are taken away: the
  # stash, hand-offs and working set, at most 0.55 of float32's.
  assert measured[tf.bfloat16] - 1.5 * weights <= 0.55 * (measured[tf.float32] - weights), measured


@pytest.mark.slow
def test_a_bfloat16_run_trains_evaluates_inspects_and_exports_float32_signatures(capsys, tmp_path):
  import trainer_test_util  # pylint: disable=g-import-not-at-top
  logdir = str(tmp_path / 'bf16')
  override = "--model_params_override=task.fprop_dtype='bfloat16';" + trainer_test_util.FAST
  for mode in ('train', 'eval', 'export'):
    code, out, err = trainer_test_util.RunTrainer(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + logdir,
                                                  '--max_steps=10', '--mode=' + mode, override)
    assert code == 0, err
  assert "task.fprop_dtype : tf.bfloat16" in open(tmp_path / 'bf16' / 'params.txt').read()
  reader = tf.train.load_checkpoint(str(tmp_path / 'bf16' / 'train' / 'ckpt-10'))
  dtypes = reader.get_variable_to_dtype_map()
  assert {dtypes[k] for k in dtypes if k.startswith('task/')} == {tf.float32}  # float32 master weights.
  serve = tf.saved_model.load(str(tmp_path / 'bf16' / 'export' / '10')).signatures['serving_default']
  assert {s.dtype for s in serve.structured_input_signature[1].values()} == {tf.float32}
  out = serve(features=tf.ones([3, 16]))
  assert out['probs'].dtype == tf.float32 and np.allclose(out['probs'].numpy().sum(-1), 1.0, atol=1e-5)
  code, out, _ = trainer_test_util.RunTrainer(capsys, '--model=synthetic.DeepMlpGPipe', '--mode=inspect', override)
  assert code == 0 and 'weights float32, computes in bfloat16' in out
