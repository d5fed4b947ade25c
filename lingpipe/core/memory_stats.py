"""Peak memory of a computation, read from TensorFlow's allocator statistics.

TensorFlow keeps statistics (`tf.config.experimental.get_memory_info`) for GPUs always, but for the CPU only when
its allocator is a BFC allocator: with oneDNN on (lingpipe's default, cpu_kernels.py) it is, and
otherwise only when TF_CPU_ALLOCATOR_USE_BFC=true was in the environment when the runtime started (measured on
tensorflow-cpu 2.21: with TF_ENABLE_ONEDNN_OPTS=0 and no such variable, "Allocator stats not available"). The
variable is read once, when the first op runs, so setting it after `import tensorflow` still works, but not after
any op ran. The BFC allocator does not change step time measurably.

`EnableAllocatorStats()` is what the trainer, the tools, the tests and `cluster.ConfigureLocalDevices` call before
TensorFlow starts; `PeakBytes(run)` measures, and raises a one-line ConfigError where statistics cannot be had.
"""

import os

import tensorflow as tf

from lingpipe.core import errors

ENV_VAR = 'TF_CPU_ALLOCATOR_USE_BFC'


def EnableAllocatorStats():
  """Asks TensorFlow for CPU allocator statistics (a BFC allocator). Takes effect only if called before TensorFlow
  runs its first op; a value the user set in the environment is kept."""
  os.environ.setdefault(ENV_VAR, 'true')


def _Available(device):
  try:
    tf.config.experimental.get_memory_info(device)
    return True
  except ValueError:  # "Allocator stats not available for device ..."
    return False


def CheckAvailable(device, what):
  """Raises ConfigError naming `what` needs the statistics when `device` keeps none."""
  if _Available(device):
    return
  raise errors.ConfigError(
      '%s measures peak memory, but TensorFlow keeps no allocator statistics for %s in this process: it started '
      'before %s=true was set. Call lingpipe.EnableAllocatorStats() (or set %s=true in the environment) before '
      'TensorFlow runs its first op, as lingpipe-train does.' % (what, device, ENV_VAR, ENV_VAR))


def MeasuredDevice():
  """The device whose allocator a computation with default placement uses: the first GPU, else the CPU."""
  return 'GPU:0' if tf.config.list_logical_devices('GPU') else 'CPU:0'


def PeakBytes(run, device=None, what='Measuring memory'):
  """Peak bytes allocated on `device` (default: MeasuredDevice()) while run() runs, above what was allocated
  before it. On CPU all logical devices share one allocator, so this is their sum."""
  device = device or MeasuredDevice()
  CheckAvailable(device, what)
  tf.config.experimental.reset_memory_stats(device)
  before = tf.config.experimental.get_memory_info(device)['current']
  run()
  return tf.config.experimental.get_memory_info(device)['peak'] - before
