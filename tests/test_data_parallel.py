"""Data parallelism x pipeline on logical CPU devices: R replicas of a K-split pipeline (cluster.py's mesh) give
the update of one replica on the whole batch, with mirrored weights and all-reduce or summed on replica 0; batch
norm pools all replicas' moments; the errors."""

import contextlib
import os

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import optimizer
from lingpipe.distributed import cluster
from lingpipe.distributed import mirrors
from lingpipe.distributed import remote
from lingpipe.distributed import replicas
from lingpipe.layers import batch_norm
from lingpipe.layers import dropout
from lingpipe.layers import linear
from lingpipe.model import model_registry
from lingpipe.runners import train_loop
import pipeline_test_util as util


def _Mesh(num_replicas, num_splits, mesh_order='replica_major'):
  p = cluster.Params().Set(num_replicas=num_replicas, mesh_order=mesh_order)
  return cluster.Cluster.FromParams(p, num_splits)


def _TaskAndBatch(model, num_replicas, num_splits, num_micro_batches, override=''):
  p = model_registry.GetParams(model, 'Train')
  p.FromText(override)
  p.task.network.Set(num_splits=num_splits, num_micro_batches=num_micro_batches)
  p.cluster.num_replicas = num_replicas
  mesh = cluster.Cluster.FromParams(p.cluster, num_splits)
  with cluster.Use(mesh):
    task = p.task.Instantiate()
  batch = next(iter(p.input.Instantiate().GetDataset()))
  return task, batch, mesh


def _Gradients(task, batch, mesh):
  with cluster.Use(mesh), context.Training(True), context.StepSeed(tf.constant(3, tf.int64)):
    loss, metrics, grads = tf.function(task.ComputeGradients, autograph=False)(batch)
  return loss, metrics, grads


def _AssertSameUpdate(reference, actual):
  """The same loss, gradients and metrics (value and weight) from two (loss, metrics, grads)."""
  (loss, metrics, grads), (r_loss, r_metrics, r_grads) = reference, actual
  util.AssertClose(loss, r_loss)
  util.AssertClose(grads, r_grads)
  for name in metrics:
    np.testing.assert_allclose(metrics[name][0], r_metrics[name][0], rtol=1e-5)
    np.testing.assert_allclose(metrics[name][1], r_metrics[name][1])


@pytest.mark.parametrize('num_replicas,num_splits,num_micro_batches', [
    pytest.param(2, 2, 4, marks=pytest.mark.slow), (2, 1, 1), pytest.param(4, 1, 2, marks=pytest.mark.slow)])
def test_replicas_give_the_update_of_one_replica_on_the_whole_batch(num_replicas, num_splits, num_micro_batches):
  one, batch, one_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 1, num_splits, num_micro_batches)
  many, _, many_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', num_replicas, num_splits, num_micro_batches)
  _AssertSameUpdate(_Gradients(one, batch, one_mesh), _Gradients(many, batch, many_mesh))


@pytest.mark.parametrize('num_replicas,num_splits,num_micro_batches,override', [
    (2, 2, 4, ''), (4, 1, 2, ''), (2, 2, 4, 'task.network.schedule="1f1b"')])
@pytest.mark.slow
def test_mirrored_replicas_each_get_the_gradients_of_one_replica_on_the_whole_batch(
    num_replicas, num_splits, num_micro_batches, override):
  """Each replica reads its own copies (on its own devices) and gets the all-reduced sum for them."""
  one, batch, one_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 1, num_splits, num_micro_batches, override)
  many, _, many_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', num_replicas, num_splits, num_micro_batches, override)
  mirrored = mirrors.Mirrors(many.trainable_variables, many.CreateOptimizer(), many_mesh)
  for r in range(1, num_replicas):
    assert [v.device[-5:] for v in mirrored.variables[r]] == [
        mirrors._Counterpart(many_mesh, v.device, r)[-5:] for v in many.trainable_variables]
  assert {v.device[-5:] for v in mirrored.variables[-1]} == {d[-5:] for d in many_mesh.devices[-1]}
  reference = _Gradients(one, batch, one_mesh)
  with cluster.Use(many_mesh), mirrors.Use(mirrored), context.Training(True), \
      context.StepSeed(tf.constant(3, tf.int64)):
    loss, metrics, per_replica = tf.function(many.ComputeReplicaGradients, autograph=False)(batch)
  assert len(per_replica) == num_replicas
  for grads in per_replica:
    _AssertSameUpdate(reference, (loss, metrics, grads))


def _TrainLoop(logdir, num_replicas, exchange='all_reduce', max_steps=4):
  p = model_registry.GetParams('synthetic.DeepMlpGPipe', 'Train')
  p.task.network.Set(num_splits=2, num_micro_batches=2)
  p.task.train.Set(max_steps=max_steps, save_interval_steps=4, clip_gradient_norm_to_value=0.5)
  p.cluster.Set(num_replicas=num_replicas, gradient_exchange=exchange)
  with cluster.Use(cluster.Cluster.FromParams(p.cluster, 2)):
    loop = train_loop.TrainLoop(p, str(logdir), out=open(os.devnull, 'w'))
    loop.Run()
  return loop


@pytest.mark.slow
def test_mirrored_weights_train_as_one_replica_stay_equal_are_saved_once_and_resume(tmp_path):
  """Adam (its slots mirrored too) and clipping, through the trainer: R=2 x K=2 ends where one replica does, the
  copies equal replica 0's after every run, checkpoints hold one copy, and a resumed run syncs the copies (and
  slots) from it."""
  one = _TrainLoop(tmp_path / 'one', 1, max_steps=6)
  summed = _TrainLoop(tmp_path / 'summed', 2, 'sum_on_replica_0', max_steps=6)
  assert summed.mirrors is None
  mirrored = _TrainLoop(tmp_path / 'mirrored', 2)
  assert mirrored.mirrors.MaxDifference() == 0.0
  names = [name for name, _ in tf.train.list_variables(str(tmp_path / 'mirrored' / 'train' / 'ckpt-4'))]
  assert not [n for n in names if 'replica_1' in n or 'ordering_token' in n]
  assert names == [name for name, _ in tf.train.list_variables(str(tmp_path / 'summed' / 'train' / 'ckpt-4'))]
  resumed = _TrainLoop(tmp_path / 'mirrored', 2, max_steps=6)
  assert resumed.resumed_step == 4 and resumed.mirrors.MaxDifference() == 0.0
  for loop in (summed, resumed):
    for v_one, v in zip(one.task.trainable_variables, loop.task.trainable_variables):
      np.testing.assert_allclose(v.numpy(), v_one.numpy(), rtol=1e-5, atol=1e-6, err_msg=v.name)


@pytest.mark.slow
def test_bfloat16_replicas_give_the_update_of_one_replica_and_scale_the_loss_alike():
  """Replicas of a bfloat16 pipeline (hand-offs, and the replicas' gradients summed, in float32) against one
  replica, also with a loss scale (replicas.ComputeGradients scales each replica's loss)."""
  import test_mixed_precision as mixed  # pylint: disable=g-import-not-at-top
  override = "task.fprop_dtype='bfloat16'"
  one, batch, one_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 1, 2, 4, override)
  many, _, many_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 2, 2, 4, override)
  (loss, _, grads), (r_loss, _, r_grads) = _Gradients(one, batch, one_mesh), _Gradients(many, batch, many_mesh)
  assert all(g.dtype == tf.float32 for g in r_grads)
  mixed.AssertCloseInLowPrecision((loss, grads), (r_loss, r_grads))
  with cluster.Use(many_mesh), context.Training(True), context.StepSeed(tf.constant(3, tf.int64)):
    scaled = tf.function(lambda b: many.ComputeGradients(b, tf.constant(256.0)), autograph=False)(batch)[2]
  mixed.AssertCloseInLowPrecision((loss, grads), (r_loss, [g / 256.0 for g in scaled]))


@pytest.mark.parametrize('override', ['schedule="1f1b"', 'schedule="interleaved_1f1b"\ntask.network.virtual_stages=2'])
def test_replicas_under_the_loss_inside_schedules_give_the_plain_update(override):
  """2 replicas x 2 devices (x 2 cells each, interleaved), the loss inside each replica's pipeline: the update of
  one plain replica (gpipe, one micro-batch, one cell) on the whole batch."""
  one, batch, one_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 1, 1, 1)
  many, _, many_mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 2, 2, 4, 'task.network.' + override)
  _AssertSameUpdate(_Gradients(one, batch, one_mesh), _Gradients(many, batch, many_mesh))


@pytest.mark.slow
def test_replica_r_runs_on_its_own_row_of_the_mesh():
  task, batch, mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 2, 2, 2)
  assert mesh.devices == [['/device:CPU:0', '/device:CPU:1'], ['/device:CPU:2', '/device:CPU:3']]
  pipe = task.network
  assert {v.device[-5:] for v in pipe.CellVariables(1)} == {'CPU:1'}  # Variables: replica 0's devices.

  def Step(b):
    with cluster.Use(mesh), context.Training(True):
      return task.ComputeGradients(b)[2]

  graph_def = tf.function(Step, autograph=False).get_concrete_function(batch).graph.as_graph_def()
  backward = {}
  for function in graph_def.library.function:
    # The layers' work: their MatMuls, or the calls of the function their kind shares (layer_functions.py).
    matmul_devices = {n.device[-5:] for n in function.node_def if n.op == 'MatMul' or (
        n.op.endswith('PartitionedCall') and 'Body' in n.attr['f'].func.name)}
    if matmul_devices and 'Step' in function.signature.name:  # The re-computing backward of a (cell, replica).
      assert len(matmul_devices) == 1, matmul_devices
      backward[function.signature.name] = matmul_devices.pop()
  # One trace per (cell, replica) for its re-computing backwards (the last micro-batch's uses its tape:
  # schedule.KeepWhereBackwardFollows), on that replica's device of the cell.
  assert sorted(backward.values()) == ['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3'], backward


@pytest.mark.parametrize('mirrored', [False, True])
def test_batch_norm_moves_once_by_the_moments_of_all_replicas_and_micro_batches(mirrored):
  """Also when each replica reads its own copies of the weights: the moving statistics are not mirrored."""
  layers = [linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8),
            batch_norm.BatchNormLayer.Params().Set(dim=8, decay=0.9),
            linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8)]
  with cluster.Use(_Mesh(2, 2)):
    plain, pipe = util.Pair(layers, num_splits=2, num_micro_batches=2, remat='always')
  assert pipe.num_replicas == 2
  copies = None
  if mirrored:
    copies = mirrors.Mirrors(pipe.trainable_variables, optimizer.SGD.Params().Instantiate().Build(
        pipe.trainable_variables), _Mesh(2, 2))
  x = tf.constant(np.random.RandomState(5).normal(size=(16, 8)), tf.float32)
  moments = context.BatchNormStats()
  with cluster.Use(_Mesh(2, 2)), mirrors.Use(copies), context.Training(True), context.CollectBatchNormStats(moments):
    outputs = []
    for r, shard in enumerate(tf.split(x, 2)):
      with context.Replica(r), copies.Reading([pipe], r) if copies else contextlib.nullcontext():
        outputs.append(pipe.FProp(shard))
  bn = pipe.units[1]
  # The moments of both replicas' 2 micro-batches, merged into one value counting all 16 rows; none applied yet.
  assert float(moments.moments[bn.path][1].count) == 16
  np.testing.assert_allclose(bn.moving_mean.numpy(), np.zeros(8))
  moments.Update()
  with context.Training(True):  # Each of the 4 parts is normalized with its own moments, as GPipe does.
    per_part = tf.concat([plain.FProp(part) for part in tf.split(x, 4)], axis=0)
  np.testing.assert_allclose(tf.concat(outputs, 0), per_part, rtol=1e-5, atol=1e-5)
  # One update from the moments of the whole batch.
  whole = plain.sub[0].FProp(x)
  mean, variance = tf.nn.moments(whole, axes=[0])
  np.testing.assert_allclose(bn.moving_mean.numpy(), 0.1 * mean.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.moving_variance.numpy(), 0.9 + 0.1 * variance.numpy(), rtol=1e-5, atol=1e-6)


def test_combine_replicas_weights_losses_by_their_tokens():
  # Two replicas with 3 and 1 tokens: the whole-batch per-token loss is (3*2 + 1*6) / 4 = 3.
  results = [(tf.constant(2.0), {'loss': (tf.constant(2.0), tf.constant(3.0))}),
             (tf.constant(6.0), {'loss': (tf.constant(6.0), tf.constant(1.0))})]
  loss, metrics, scales = replicas.CombineReplicas(results)
  assert float(loss) == 3.0 and float(metrics['loss'][0]) == 3.0 and float(metrics['loss'][1]) == 4.0
  assert [float(s) for s in scales] == [0.75, 0.25]


def test_mesh_orders_and_errors():
  assert _Mesh(2, 2, 'split_major').devices == [['/device:CPU:0', '/device:CPU:2'],
                                                ['/device:CPU:1', '/device:CPU:3']]
  with pytest.raises(errors.ConfigError, match=r'3 replicas x 2 splits need 6 devices, but this machine has 4'):
    _Mesh(3, 2)
  with pytest.raises(errors.ConfigError, match="Param mesh_order: 'split_majr' is not allowed; expected one of "
                     r".*\(Did you mean: split_major"):
    _Mesh(1, 2, 'split_majr')
  with pytest.raises(errors.ConfigError, match="device_type must be one of auto, GPU, CPU, got 'gpu'"):
    cluster.RemoteSlots('worker', 'gpu')
  task, batch, mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 2, 2, 2, 'input.batch_size=63')
  with pytest.raises(errors.ConfigError, match='batch size 63 is not divisible by cluster.num_replicas 2'):
    _Gradients(task, batch, mesh)


def test_cluster_spec_parsing():
  assert remote.ParseClusterSpec('worker=127.0.0.1:1,127.0.0.1:2') == {'worker': ['127.0.0.1:1', '127.0.0.1:2']}
  assert remote.ParseClusterSpec('{"worker": ["h:1"]}') == {'worker': ['h:1']}
  for bad in ('{"worker": 3}', 'worker=', '{oops', 'worker=nohostport'):
    with pytest.raises(errors.ConfigError, match='cluster spec'):
      remote.ParseClusterSpec(bad)
  with pytest.raises(errors.ConfigError, match="Job 'wrker' is not in the cluster spec.*Did you mean: worker"):
    remote.CheckTask({'worker': ['h:1']}, 'wrker', 0)
  with pytest.raises(errors.ConfigError, match=r"Task 2 does not exist: job 'worker' has 1 task\(s\)"):
    remote.CheckTask({'worker': ['h:1']}, 'worker', 2)


def test_replica_backward_outside_pipelines_runs_on_the_replicas_device():
  # K=1, M=1, remat=never takes the plain path (no custom gradient); the classifier's softmax is outside any
  # pipeline. Both replicas' forward and backward matmuls must sit on their own device, none on a default one.
  task, batch, mesh = _TaskAndBatch('synthetic.DeepMlpGPipe', 2, 1, 1, 'task.network.remat="never"')

  def Step(b):
    with cluster.Use(mesh), context.Training(True):
      return task.ComputeGradients(b)[2]

  graph = tf.function(Step, autograph=False).get_concrete_function(batch).graph
  devices = [op.device[-5:] for op in graph.get_operations() if op.type == 'MatMul']
  assert devices.count('CPU:0') == devices.count('CPU:1') == len(devices) // 2 > 8, devices


def test_replicas_draw_their_own_dropout_masks_and_the_recompute_redraws_them():
  layers = util.Tanh(2) + [dropout.DropoutLayer.Params().Set(keep_prob=0.5, deterministic=True)] + util.Tanh(2)
  x = tf.constant(np.random.RandomState(2).normal(size=(8, 8)), tf.float32)

  def PerReplica(remat):
    with cluster.Use(_Mesh(2, 2)):
      _, pipe = util.Pair(layers, num_splits=2, num_micro_batches=2, remat=remat)

    @tf.function(autograph=False)
    def Run(x):
      outputs, grads = [], []
      for r in range(2):  # The same rows in both replicas.
        with tf.GradientTape() as tape:
          with context.Replica(r), context.Training(True), context.StepSeed(tf.constant(7, tf.int64)):
            out = pipe.FProp(x)
          loss = tf.reduce_sum(out * tf.range(8, dtype=tf.float32)[None, :])
        outputs.append(out)
        grads.append(tape.gradient(loss, pipe.trainable_variables))  # Outside the Replica block, as in training.
      return outputs, grads

    return Run(x)

  (out0, out1), grads = PerReplica('always')
  assert np.abs(out0.numpy() - out1.numpy()).max() > 1e-3  # Replica 1 drew other masks than replica 0.
  _, stored_grads = PerReplica('never')
  util.AssertClose(grads, stored_grads)  # Re-computing replica 1's cells redraws its own masks.
