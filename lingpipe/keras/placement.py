"""Where a lingpipe.keras.Pipeline's cells run: its R x K device mesh, and never a tf.distribute strategy's."""

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.distributed import cluster


def RefuseStrategyScope(what):
  """A tf.distribute strategy would mirror every variable on its own devices, undoing the pipeline's placement."""
  if tf.distribute.has_strategy():
    raise errors.ConfigError(
        'lingpipe.keras.Pipeline cannot %s inside the scope of %s: it places each cell\'s variables on that cell\'s '
        'device, which the strategy would replace by copies on its own devices. Build and fit the Pipeline outside '
        'the scope; for data parallelism pass Pipeline(..., num_replicas=R).' % (
            what, type(tf.distribute.get_strategy()).__name__))


def Mesh(devices, num_replicas, num_splits):
  """The pipeline's devices: as given (K, or R lists of K), else the first R x K local devices for R > 1."""
  if not isinstance(num_replicas, int) or num_replicas < 1:
    raise errors.ConfigError('lingpipe.keras.Pipeline: num_replicas must be a positive integer, got %r.' % (
        num_replicas,))
  if devices:
    devices = [list(row) if isinstance(row, (list, tuple)) else row for row in devices]
    rows = len(devices) if isinstance(devices[0], list) else 1
    if rows != num_replicas:
      raise errors.ConfigError(
          'lingpipe.keras.Pipeline: devices lists %d replica(s) of devices and num_replicas is %d; pass '
          'num_replicas=%d, or one list of %d devices per replica.' % (rows, num_replicas, rows, num_splits))
    return devices
  if num_replicas == 1:
    return None  # The current cluster's (locally: GPUs, else logical CPU devices).
  local = cluster.LocalDevices()
  needed = num_replicas * num_splits
  if needed > len(local):
    raise errors.ConfigError(
        'lingpipe.keras.Pipeline: %d replicas x %d splits need %d devices, and this process has %d (%s). Make more '
        'logical CPU devices before TensorFlow starts (lingpipe.distributed.cluster.ConfigureLocalDevices(%d)), '
        'or pass devices= as %d lists of %d.' % (num_replicas, num_splits, needed, len(local), ', '.join(local),
                                                 needed, num_replicas, num_splits))
  return [local[r * num_splits:(r + 1) * num_splits] for r in range(num_replicas)]
