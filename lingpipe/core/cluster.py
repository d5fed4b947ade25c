"""Devices for pipeline cells: which device runs split k of replica r.

Locally the devices are GPUs when there are enough, otherwise logical CPU devices made with
`tf.config.set_logical_device_configuration` (one per split), which must happen before TensorFlow initializes
its runtime: call `ConfigureLocalDevices(K)` first thing (the trainer does, from --pipeline_devices or the
model's params). On CPU, intra_op=1 makes each logical device behave like one core ("one core = one
accelerator") and inter_op >= 2 lets cells run concurrently (logical CPU devices share one inter-op pool, and
inter_op=1 serializes everything).

A `Cluster` can also be given explicit device names, such as '/job:worker/task:1/device:GPU:0', so remote
pipelines need no change in the layers.
"""

import threading

import tensorflow as tf

from lingpipe.core import errors

_LOCK = threading.Lock()
_CONFIGURED = {}


def ConfigureLocalDevices(num_devices, intra_op_threads=1, inter_op_threads=None):
  """Makes at least `num_devices` local devices available; returns their names.

  Uses GPUs if there are num_devices of them; otherwise splits the first CPU into num_devices logical devices and
  sets the threading (intra_op_threads per op; inter_op_threads defaults to max(2, num_devices)). Calling it again
  with the same or a smaller number is a no-op; asking for more after TensorFlow started is a ConfigError.
  """
  if num_devices < 1:
    raise errors.ConfigError('num_devices must be >= 1, got %d.' % num_devices)
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
      tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads or max(2, num_devices))
    except RuntimeError as e:
      raise errors.ConfigError(
          'Cannot create %d logical CPU devices: TensorFlow is already initialized with %d. Call '
          'lingpipe.core.cluster.ConfigureLocalDevices(%d) (or pass --pipeline_devices=%d to the trainer) before '
          'running any TensorFlow op.' % (num_devices, have, num_devices, num_devices)) from e
    _CONFIGURED['cpus'] = num_devices
    return ['/device:CPU:%d' % i for i in range(num_devices)]


def LocalDevices():
  """Names of the local accelerator devices, or of the logical CPU devices when there is no GPU."""
  gpus = tf.config.list_logical_devices('GPU')
  if gpus:
    return [d.name for d in gpus]
  return [d.name for d in tf.config.list_logical_devices('CPU')]


class Cluster:
  """Maps (replica, split) to a device name. `devices` is a list per replica, or a flat list for one replica."""

  def __init__(self, devices=None):
    if devices is None:
      devices = [LocalDevices()]
    elif devices and isinstance(devices[0], str):
      devices = [list(devices)]
    self.devices = [list(d) for d in devices]

  @property
  def num_replicas(self):
    return len(self.devices)

  def Device(self, split, replica=0, num_splits=None):
    """The device of `split` in `replica`. With fewer devices than splits, splits wrap around (and share)."""
    row = self.devices[replica]
    if num_splits is not None and num_splits > len(row):
      raise errors.ConfigError('The pipeline has %d splits but only %d devices are available (%s). Set up more '
                               'with --pipeline_devices=%d (logical CPU devices) or use fewer splits.' % (
                                   num_splits, len(row), ', '.join(row), num_splits))
    return row[split % len(row)]


def PipelineParams(params):
  """The Params of every PipeliningLayer in a Params tree (found by their cell_tpl and num_splits fields)."""
  from lingpipe.core import hyperparams  # pylint: disable=g-import-not-at-top
  return [p for p in hyperparams.IterNested(params) if 'cell_tpl' in p and 'num_splits' in p]


def MaxNumSplits(params):
  """The largest number of cells of any PipeliningLayer in a Params tree (0 if there is none)."""
  return max([len(p.cell_tpl) if p.cell_tpl else p.num_splits for p in PipelineParams(params)], default=0)
