"""Data parallelism: R pipeline replicas, each on its own row of the device mesh (cluster.py), one update.

The batch is split into R equal shards and replica r runs its shard -- forward and backward -- on its own
devices (context.Replica). The loss is the mean of the replicas' losses weighted by their loss weights
(metrics['loss'][1], e.g. tokens), and the gradients are the replicas' gradients weighted the same way and summed:
by collective all-reduce into every replica's mirrored copy (mirrors.py), or on each variable's device. Both equal
those of one replica on the whole batch. Batch norm moves its averages once, by the moments of all replicas' parts
(context.BatchNormStats).
"""

import contextlib

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors


def ComputeGradients(task, batch, mesh, loss_scale=None, mirrored=None):
  """(loss, metrics, [grads of replica r's variables]) of `task` (a BaseTask) on `batch`, sharded over the
  replicas of `mesh`; with `loss_scale`, the gradients of the loss times it. With `mirrored` (a mirrors.Mirrors),
  replica r reads its own copies and each replica gets the all-reduced gradients of its copies; without, one list:
  the sums on replica 0's variables."""
  variables = task.trainable_variables
  l2_weight = task.params.train.l2_regularizer_weight
  results, tapes = [], []
  moments = context.BatchNormStats()
  with context.CollectBatchNormStats(moments):
    for r, shard in enumerate(ReplicaShards(batch, mesh.num_replicas)):
      reading = mirrored.Reading([task], r) if mirrored else contextlib.nullcontext()
      with context.Replica(r), tf.device(mesh.ReplicaDevice(r)), reading, tf.GradientTape() as tape:
        results.append(task.FProp(shard))
      tapes.append(tape)
  moments.Update()
  loss, metrics, scales = CombineReplicas(results)
  if loss_scale is not None:
    scales = [s * tf.cast(loss_scale, s.dtype) for s in scales]
  per_replica = []
  for r, (tape, (replica_loss, _)) in enumerate(zip(tapes, results)):
    with tf.device(mesh.ReplicaDevice(r)):  # Each replica's backward on its own devices.
      read = mirrored.variables[r] if mirrored else variables
      per_replica.append(tape.gradient(replica_loss, read, output_gradients=scales[r]))
  if l2_weight:  # Once: on replica 0's variables, before the sum.
    with tf.GradientTape() as tape:
      penalty = l2_weight * task.L2Penalty() * (1.0 if loss_scale is None else loss_scale)
    penalty_grads = tape.gradient(penalty, variables)
    if mirrored:
      per_replica[0] = [_Add(g, p, v.device) for g, p, v in zip(per_replica[0], penalty_grads, variables)]
    else:
      per_replica.append(penalty_grads)
  if mirrored:
    return loss, metrics, mirrored.AllReduce(per_replica)
  grads = []
  for var, parts in zip(variables, zip(*per_replica)):
    parts = [tf.convert_to_tensor(g) for g in parts if g is not None]
    with tf.device(var.device):  # Summed where the variable lives.
      grads.append(tf.add_n(parts) if parts else None)
  return loss, metrics, [grads]


def _Add(a, b, device):
  if a is None or b is None:
    return b if a is None else a
  with tf.device(device):
    return tf.convert_to_tensor(a) + tf.convert_to_tensor(b)


def ReplicaShards(batch, num_replicas):
  """`batch` cut into `num_replicas` equal shards along dimension 0 (a list of structures like `batch`)."""
  leaves = tf.nest.flatten(batch)
  sizes = sorted({leaf.shape[0] for leaf in leaves}, key=str)
  batch_size = sizes[0]
  if len(sizes) > 1:
    raise errors.ConfigError('The batch\'s tensors disagree on the batch size (dimension 0: %s); data-parallel '
                             'replicas each take an equal share of every tensor.' % ', '.join(map(str, sizes)))
  if batch_size is None or batch_size % num_replicas:
    raise errors.ConfigError('The batch size %s is not divisible by cluster.num_replicas %d: each replica takes '
                             'an equal share. Use a batch size that is a multiple of %d.' % (
                                 batch_size, num_replicas, num_replicas))
  parts = [tf.split(leaf, num_replicas, axis=0) for leaf in leaves]
  return [tf.nest.pack_sequence_as(batch, [p[r] for p in parts]) for r in range(num_replicas)]


def CombineReplicas(results):
  """(loss, metrics, scales) of the whole batch from each replica's (loss, metrics): weighted means and summed
  weights; scales[r] is replica r's share of the loss (its weight over the total), by which its gradients count.

  The loss weight of a replica is its metrics['loss'] weight when the task reports one (tokens, examples), else 1.
  """
  dtype = tf.convert_to_tensor(results[0][0]).dtype

  def Weight(metrics, name, dtype):
    if name in metrics:
      return tf.stop_gradient(tf.cast(metrics[name][1], dtype))
    return tf.constant(1.0, dtype)

  weights = [Weight(metrics, 'loss', dtype) for _, metrics in results]
  total = tf.add_n(weights)
  scales = [w / total for w in weights]
  loss = tf.add_n([l * scale for (l, _), scale in zip(results, scales)])
  combined = {}
  for name in results[0][1]:
    values = [tf.cast(metrics[name][0], tf.float32) for _, metrics in results]
    ws = [Weight(metrics, name, tf.float32) for _, metrics in results]
    weight = tf.add_n(ws)
    combined[name] = (tf.add_n([v * w for v, w in zip(values, ws)]) / tf.maximum(weight, 1e-30), weight)
  return loss, combined, scales
