r"""Devices of pipelines: which device runs split k of replica r (a 2-D mesh), locally or on remote workers.

Devices are taken in *slot order*: locally the GPUs, or logical CPU devices when there are not enough GPUs; on a
cluster (see remote.py) task 0's devices of the worker job, then task 1's, and so on. R replicas of a K-split
pipeline take R*K slots, as `cluster.mesh_order` says (model params, so `--mode=inspect` prints the map):

  replica_major (default): (replica r, split k) -> slot r*K + k. A replica's splits are neighbours, on one host
      when it has K devices: pipeline traffic stays inside a host, and only gradient averaging crosses hosts.
  split_major: (r, k) -> slot k*R + r. Split k of every replica sits together: weights and their gradient
      averaging stay inside a host, the pipeline's boundary activations cross hosts.

    two workers with two GPUs each, R=2, K=2:
                      split 0               split 1
      replica_major   rep 0: task:0/GPU:0   task:0/GPU:1      (one pipeline per host)
                      rep 1: task:1/GPU:0   task:1/GPU:1
      split_major     rep 0: task:0/GPU:0   task:1/GPU:0      (one split per host)
                      rep 1: task:0/GPU:1   task:1/GPU:1

Variables of split k live on replica 0's device for split k; other replicas read them and send their gradients
back, where they are averaged (BaseTask.ComputeGradients). Layers outside any pipeline run, for replica r, on the
device of (r, split 0).

On CPU, `ConfigureLocalDevices(n)` makes n logical devices with intra_op=1 each, so each behaves like one core ("one
core = one accelerator"), and inter_op >= 2 lets cells run concurrently (logical CPU devices share one inter-op
pool, and inter_op=1 serializes everything; more threads than cores only add switching). It must run before
TensorFlow initializes: the trainer calls it first thing, from --pipeline_devices or the model's params.
"""

import contextlib
import os
import re
import threading

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.core import memory_stats
from lingpipe.core import param_checks

MESH_ORDERS = ('replica_major', 'split_major')
GRADIENT_EXCHANGES = ('all_reduce', 'sum_on_replica_0')
DEVICE_TYPES = ('auto', 'GPU', 'CPU')

_LOCK = threading.Lock()
_CONFIGURED = {}
_CURRENT = []


def Params():
  """The model's `cluster` params: how replicas and splits map onto devices."""
  p = hyperparams.Params()
  p.Define('num_replicas', 1, 'Data-parallel replicas R of every pipeline: the global batch is split over them and '
           'their gradients are averaged.', check=param_checks.Int(1))
  p.Define('gradient_exchange', 'all_reduce', "How replicas combine gradients in training: 'all_reduce' (each "
           "replica keeps a copy of the weights on its devices; collective all-reduce, ring or NCCL; see "
           "distributed/mirrors.py) or 'sum_on_replica_0' (one copy of the weights, on replica 0's devices, where "
           "every replica's gradients are added).", check=param_checks.OneOf(*GRADIENT_EXCHANGES))
  p.Define('mesh_order', 'replica_major', "How (replica, split) takes device slots: 'replica_major' (r*K + k: a "
           "replica's splits together, one pipeline per host) or 'split_major' (k*R + r: one split per host).",
           check=param_checks.OneOf(*MESH_ORDERS))
  p.Define('job', 'worker', 'Job of the cluster spec whose tasks hold the pipelines (with --cluster_spec).')
  p.Define('device_type', 'auto', "Devices to use: 'GPU', 'CPU', or 'auto' (GPUs where there are any).")
  p.Define('devices_per_task', 0, 'Devices of each worker task to use (0: all of device_type).',
           check=param_checks.Int(0))
  p.Define('timeout_s', 300.0, 'A worker that does not answer for this long (a step that makes no progress, or a '
           'start-up check) stops the trainer with an error naming it.', check=param_checks.Positive())
  p.Define('min_remote_inter_op_threads', 2, 'Inter-op threads, at least, with which the workers run this process\'s '
           'steps (TensorFlow hands them the connecting process\'s setting; see remote.RequestInterOpThreads). With '
           'one, a pipeline\'s hand-offs wait for whole actions.')
  return p


def ConfigureLocalDevices(num_devices, intra_op_threads=1, inter_op_threads=None):
  """Makes at least `num_devices` local devices available; returns their names.

  Uses GPUs if there are num_devices of them; otherwise splits the first CPU into num_devices logical devices and
  sets the threading (intra_op_threads per op; inter_op_threads defaults to DefaultInterOpThreads(num_devices)).
  Calling it again with the same or a smaller number is a no-op; asking for more after TensorFlow started is a
  ConfigError.
  """
  if num_devices < 1:
    raise errors.ConfigError('num_devices must be >= 1, got %d.' % num_devices)
  memory_stats.EnableAllocatorStats()  # Also a before-TensorFlow-starts setting (memory_stats.py).
  with _LOCK:
    gpus = tf.config.list_physical_devices('GPU')
    if len(gpus) >= num_devices:
      return ['/device:GPU:%d' % i for i in range(num_devices)]
    cpus = tf.config.list_physical_devices('CPU')
    existing = tf.config.get_logical_device_configuration(cpus[0])
    have = len(existing) if existing else 1
    if _CONFIGURED.get('cpus', 0) >= num_devices or (existing and have >= num_devices):
      return ['/device:CPU:%d' % i for i in range(num_devices)]
    try:
      tf.config.set_logical_device_configuration(
          cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)])
      tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
      tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads or DefaultInterOpThreads(num_devices))
    except RuntimeError as e:
      raise errors.ConfigError(
          'Cannot create %d logical CPU devices: TensorFlow is already initialized with %d. Call '
          'lingpipe.distributed.cluster.ConfigureLocalDevices(%d) (or pass --pipeline_devices=%d to the trainer) '
          'before running any TensorFlow op.' % (num_devices, have, num_devices, num_devices)) from e
    _CONFIGURED['cpus'] = num_devices
    return ['/device:CPU:%d' % i for i in range(num_devices)]


def DefaultInterOpThreads(num_devices):
  """One inter-op thread per logical device, but no more than the cores this process may use, and at least 2.

  Threads beyond the cores only add switching: on a 2-core machine, K=2 over K=1 at the same M (Transformer,
  M=4 and 8) reached 0.82-0.83 and 0.81-0.84 of the ideal with 2 inter-op threads against 0.76-0.78 and
  0.71-0.74 with 4 (benchmarks/pipeline_benchmark.py --quick --inter_op=2 / 4, two runs each).
  """
  return max(2, min(num_devices, UsableCores()))


def UsableCores():
  """The cores this process may run on (its affinity, as `taskset` sets it), or all where that is unknown."""
  return len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)


def LocalDeviceCount(requested=None):
  """How many local devices a pipeline may use, before TensorFlow makes them: `requested` (--pipeline_devices), else
  the GPUs, else one logical CPU device per core this process may use."""
  if requested:
    return requested
  gpus = tf.config.list_physical_devices('GPU')
  return len(gpus) if gpus else max(1, UsableCores())


def LocalDevices():
  """Names of the local accelerator devices, or of the logical CPU devices when there is no GPU."""
  gpus = [d.name for d in tf.config.list_logical_devices('GPU') if '/job:' not in d.name]
  if gpus:
    return gpus
  return [d.name for d in tf.config.list_logical_devices('CPU') if '/job:' not in d.name]


def _TaskAndIndex(name):
  m = re.search(r'/task:(\d+)/device:(\w+):(\d+)$', name)
  return (int(m.group(1)), int(m.group(3))) if m else (0, 0)


def RemoteSlots(job, device_type='auto', devices_per_task=0):
  """The devices of `job` (after connecting to a cluster) in slot order: by task, then by device index."""
  if device_type not in DEVICE_TYPES:
    raise errors.ConfigError('cluster.device_type must be one of %s, got %r.%s' % (
        ', '.join(DEVICE_TYPES), device_type, errors.DidYouMean(str(device_type), DEVICE_TYPES)))
  names = [d.name for d in tf.config.list_logical_devices() if '/job:%s/' % job in d.name]
  kind = device_type
  if kind == 'auto':
    kind = 'GPU' if any('/device:GPU:' in n for n in names) else 'CPU'
  names = sorted((n for n in names if '/device:%s:' % kind in n), key=_TaskAndIndex)
  if devices_per_task:
    names = [n for n in names if _TaskAndIndex(n)[1] < devices_per_task]
  return names


class Cluster:
  """Maps (replica, split) to a device name.

  `devices`: a list of device names per replica (an explicit mesh), or one flat list for one replica; default:
  the local devices, one replica. Cluster.FromParams builds the mesh from the model's `cluster` params.
  """

  def __init__(self, devices=None, remote_job=None):
    if devices is None:
      devices = [LocalDevices()]
    elif devices and isinstance(devices[0], str):
      devices = [list(devices)]
    self.devices = [list(d) for d in devices]
    self.remote_job = remote_job  # The worker job when the devices are remote (see remote.py), else None.

  @classmethod
  def FromParams(cls, params, num_splits, slots=None, remote_job=None):
    """The R x K mesh of `params` (the model's `cluster` params) over `slots` (default: the local devices)."""
    slots = list(slots) if slots is not None else LocalDevices()
    num_replicas, num_splits = params.num_replicas, max(1, num_splits)
    needed = num_replicas * num_splits
    if needed > len(slots):
      where = 'the workers of job %r have' % remote_job if remote_job else 'this machine has'
      fix = ('start more workers or give each more devices (lingpipe-worker --cpu_devices)' if remote_job else
             'pass --pipeline_devices=%d (logical CPU devices)' % needed)
      raise errors.ConfigError(
          '%d replicas x %d splits need %d devices, but %s %d (%s). Lower cluster.num_replicas or the '
          'pipeline\'s num_splits, or %s.' % (num_replicas, num_splits, needed, where, len(slots),
                                              ', '.join(slots), fix))
    if params.mesh_order == 'replica_major':
      mesh = [[slots[r * num_splits + k] for k in range(num_splits)] for r in range(num_replicas)]
    else:
      mesh = [[slots[k * num_replicas + r] for k in range(num_splits)] for r in range(num_replicas)]
    return cls(mesh, remote_job)

  @property
  def num_replicas(self):
    return len(self.devices)

  @property
  def is_remote(self):
    return self.remote_job is not None

  def Device(self, split, replica=0, num_splits=None):
    """The device of `split` in `replica`. With fewer devices than splits, splits wrap around (and share)."""
    if not 0 <= replica < len(self.devices):
      raise errors.ConfigError('Replica %d does not exist: the cluster has %d replica(s) (cluster.num_replicas).' %
                               (replica, len(self.devices)))
    row = self.devices[replica]
    if num_splits is not None and num_splits > len(row):
      raise errors.ConfigError('The pipeline has %d splits but only %d devices are available (%s). Set up more '
                               'with --pipeline_devices=%d (logical CPU devices) or use fewer splits.' % (
                                   num_splits, len(row), ', '.join(row), num_splits))
    return row[split % len(row)]

  def ReplicaDevice(self, replica=0):
    """Where replica `replica` runs what lies outside pipelines (the device of its split 0)."""
    return self.Device(0, replica)

  def Placement(self):
    """A device scope for work outside pipelines (task building, the step function; not the input pipeline,
    which stays in the trainer): replica 0's split-0 device on a remote cluster; locally none, so TensorFlow
    places ops as usual."""
    return tf.device(self.ReplicaDevice(0)) if self.is_remote else contextlib.nullcontext()

  def MapLines(self):
    """The mesh as text lines, one per replica (for --mode=inspect)."""
    lines = []
    for r, row in enumerate(self.devices):
      lines.append('replica %d: %s' % (r, '  '.join('split %d -> %s' % (k, d) for k, d in enumerate(row))))
    return lines


def Current():
  """The cluster set by `Use` (the trainer's), else the local devices as one replica."""
  return _CURRENT[-1] if _CURRENT else Cluster()


@contextlib.contextmanager
def Use(c):
  """Within this block, pipelines and tasks place their work on cluster `c`."""
  _CURRENT.append(c)
  try:
    yield c
  finally:
    _CURRENT.pop()


def PipelineParams(params):
  """The Params of every PipeliningLayer in a Params tree (found by their cell_tpl and num_splits fields)."""
  return [p for p in hyperparams.IterNested(params) if 'cell_tpl' in p and 'num_splits' in p]


def MaxNumSplits(params):
  """The largest number of cells of any PipeliningLayer in a Params tree (0 if there is none)."""
  return max([len(p.cell_tpl) if p.cell_tpl else p.num_splits for p in PipelineParams(params)], default=0)
