"""Mirrored weights: each data-parallel replica keeps its own copy of the trainable variables and of the
optimizer's slots, on its own devices, and the replicas' gradients are summed by TensorFlow's collective
all-reduce (ring on CPUs and across hosts, NCCL on GPUs).

Each device then sends and receives about 2(R-1)/R of its gradients per step whatever R is, where a sum on
replica 0's devices (cluster.gradient_exchange='sum_on_replica_0') takes in (R-1) x and sends the weights back out
R-1 times. The copies are created equal to replica 0's and updated identically (the all-reduce leaves the same
sum on every device); checkpoints hold replica 0's copies only, and `Sync` makes the others equal to them.

Every device has an ordering token (a resource variable its collectives take): without one, collectives issued by
lingpipe's single client time out waiting for each other, locally and across worker processes (docs/notes/
all-reduce.md).
"""

import contextlib
import itertools

import tensorflow as tf

from lingpipe.core import base_layer

# Gradients summed by one collective, at most: fewer collectives cost fewer round trips, and smaller ones start
# while the backward is still running (benchmarks/gradient_exchange_benchmark.py --bucket_mib).
BUCKET_BYTES = 4 << 20

_CURRENT = []
_GROUP_KEYS = {}  # Devices of a collective group, in replica order -> its key (process-wide, as TensorFlow's are).
_KEYS = itertools.count(1)


class Mirrors:
  """Replica r's copies of `variables` (replica 0's are the variables themselves) and of `optimizer`'s slots, on
  the devices of `mesh` (a cluster.Cluster) row r that correspond to each variable's device in row 0."""

  def __init__(self, variables, optimizer, mesh):
    self.num_replicas = mesh.num_replicas
    self.variables = [list(variables)]
    for r in range(1, self.num_replicas):
      copies = []
      for v in variables:
        with tf.device(_Counterpart(mesh, v.device, r)):
          copies.append(tf.Variable(v.read_value(), trainable=v.trainable,
                                    name='%s/replica_%d' % (v.name.split(':')[0], r)))
      self.variables.append(copies)
    self._copies = {v.ref(): [row[i] for row in self.variables] for i, v in enumerate(variables)}
    self.optimizers = [optimizer]
    for r in range(1, self.num_replicas):
      with tf.device(mesh.ReplicaDevice(r)):  # Its step count; the slots go beside their variables (Build).
        self.optimizers.append(optimizer.params.Instantiate().Build(self.variables[r]))
    self._tokens = {}
    for row in self.variables:
      for v in row:
        if v.device not in self._tokens:
          with tf.device(v.device):
            self._tokens[v.device] = tf.Variable(0.0, trainable=False, name='collective_ordering_token')
    self._instance_keys = {}  # (devices, variable indices) -> the key of their collective.
    self.Sync()

  def Of(self, var, replica):
    """Replica `replica`'s copy of `var` (`var` itself when it is not mirrored)."""
    copies = self._copies.get(var.ref())
    return var if copies is None else copies[replica]

  def Reading(self, layers, replica):
    """Within the block, `layers` (and their descendants) read replica `replica`'s copies."""
    if replica == 0:
      return contextlib.nullcontext()
    return base_layer.VariablesAs(layers, {v.ref(): copy for v, copy in zip(self.variables[0],
                                                                              self.variables[replica])})

  def Sync(self):
    """Makes every replica's copies, slots and step count equal to replica 0's (after a restore)."""
    primary = self.optimizers[0]
    for r in range(1, self.num_replicas):
      optimizer = self.optimizers[r]
      optimizer.iterations.assign(primary.iterations)
      for v, copy in zip(self.variables[0], self.variables[r]):
        copy.assign(v)
        for name, slot in optimizer.SlotsOf(copy).items():
          slot.assign(primary.SlotsOf(v)[name])

  def AllReduce(self, per_replica):
    """[[sum over replicas of gradient i] on each replica] from per_replica[r][i], replica r's gradient of its
    copy i (None where no replica has one).

    Gradients go in buckets (Buckets): one collective for several variables, fewer round trips; issued from the
    last variables to the first, the order the backward produces their gradients, since each device runs its
    collectives in the order they were issued (its ordering token)."""
    summed = [[None] * len(per_replica[0]) for _ in range(self.num_replicas)]
    present = [i for i, parts in enumerate(zip(*per_replica)) if any(g is not None for g in parts)]
    for devices, indices in self.Buckets(present):
      group_key = _GROUP_KEYS.setdefault(devices, next(_KEYS))
      instance_key = self._instance_keys.setdefault((devices, tuple(indices)), next(_KEYS))
      for r, device in enumerate(devices):
        with tf.device(device):
          parts = [tf.zeros_like(self.variables[r][i]) if per_replica[r][i] is None
                   else tf.convert_to_tensor(per_replica[r][i]) for i in indices]
          flat = tf.concat([tf.reshape(g, [-1]) for g in parts], 0) if len(parts) > 1 else tf.reshape(parts[0], [-1])
          total = tf.raw_ops.CollectiveReduceV2(
              input=flat, group_size=self.num_replicas, group_key=group_key, instance_key=instance_key,
              ordering_token=[self._tokens[device].handle], merge_op='Add', final_op='Id',
              communication_hint='nccl' if '/DEVICE:GPU:' in device.upper() else 'ring')
          sizes = [self.variables[r][i].shape.num_elements() for i in indices]
          for i, part in zip(indices, tf.split(total, sizes) if len(indices) > 1 else [total]):
            summed[r][i] = tf.reshape(part, self.variables[r][i].shape)
    return summed

  def Buckets(self, indices):
    """[(devices, [variable indices])]: the variables among `indices`, last first, in buckets of one device group
    and dtype of up to BUCKET_BYTES (a larger variable alone)."""
    open_buckets, buckets = {}, []
    for i in reversed(indices):
      v = self.variables[0][i]
      devices = tuple(row[i].device for row in self.variables)
      key = (devices, v.dtype)
      size = v.shape.num_elements() * v.dtype.size
      bucket = open_buckets.get(key)
      if bucket is None or bucket[1] + size > BUCKET_BYTES:
        bucket = open_buckets[key] = [[], 0]
        buckets.append((devices, bucket[0]))
      bucket[0].append(i)
      bucket[1] += size
    return buckets

  def MaxDifference(self):
    """The largest absolute difference between a copy and replica 0's variable (0.0: all equal)."""
    worst = 0.0
    for row in self.variables[1:]:
      for v, copy in zip(self.variables[0], row):
        worst = max(worst, float(tf.reduce_max(tf.abs(tf.cast(copy, tf.float64) - tf.cast(v, tf.float64)))))
    return worst


def _Counterpart(mesh, device, replica):
  """The device of `replica`'s row of `mesh` in the place of `device` in row 0 (the row's first device for a
  variable placed outside the mesh)."""
  spec = tf.DeviceSpec.from_string(device)
  for k, name in enumerate(mesh.devices[0]):
    other = tf.DeviceSpec.from_string(name)
    if (other.device_type, other.device_index) == (spec.device_type, spec.device_index) and all(
        getattr(other, f) is None or getattr(other, f) == getattr(spec, f) for f in ('job', 'task')):
      return mesh.devices[replica][k]
  return mesh.devices[replica][0]


def Current():
  """The Mirrors set by `Use`, or None (replicas then sum their gradients on replica 0's devices)."""
  return _CURRENT[-1] if _CURRENT else None


@contextlib.contextmanager
def Use(mirrors):
  """Within this block, training steps read and update `mirrors` (None: no mirrors)."""
  _CURRENT.append(mirrors)
  try:
    yield mirrors
  finally:
    _CURRENT.pop()
