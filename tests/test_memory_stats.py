"""Memory measurement in a fresh process with no TF_* environment, and a clear error where it cannot work.

Each case runs in a subprocess with TF_ENABLE_ONEDNN_OPTS=0: on CPUs where oneDNN is on by default its allocator
keeps statistics anyway, which would hide a missing TF_CPU_ALLOCATOR_USE_BFC (as it did on the CI machine).
"""

import os
import subprocess
import sys
import textwrap

import pytest

from lingpipe.core import memory_stats

_PRELUDE = textwrap.dedent('''
    import tensorflow as tf
    from lingpipe.core import errors
    from lingpipe.gpipe.planner import partition
    from lingpipe.layers import linear
    layers = [linear.ProjectionLayer.Params().Set(input_dim=64, output_dim=64) for _ in range(4)]
    ''')


def _Python(code):
  env = {k: v for k, v in os.environ.items() if k != memory_stats.ENV_VAR}
  env.update(TF_ENABLE_ONEDNN_OPTS='0', TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-c', _PRELUDE + textwrap.dedent(code)], capture_output=True, text=True,
                        env=env, timeout=120)


@pytest.mark.slow
def test_configured_devices_measure_memory_in_a_fresh_process():
  result = _Python('''
      from lingpipe.core import memory_stats
      from lingpipe.distributed import cluster
      cluster.ConfigureLocalDevices(2)
      x = tf.random.normal([256, 1024])
      print('peak', memory_stats.PeakBytes(lambda: tf.matmul(x, x, transpose_a=True).numpy()))
      print('counts', partition.Partition(layers, 2, 'memory', sample_inputs=tf.random.normal([32, 64])))
      ''')
  assert result.returncode == 0, result.stderr[-2000:]
  peak = int(result.stdout.split('peak ')[1].split()[0])
  assert peak >= 1024 * 1024 * 4, result.stdout  # The [1024, 1024] float32 product.
  assert 'counts [2, 2]' in result.stdout


@pytest.mark.slow
def test_balance_memory_after_tensorflow_started_is_a_one_line_error():
  result = _Python('''
      print(float(tf.reduce_sum(tf.ones([2]))))  # The runtime starts before anyone asked for statistics.
      try:
        partition.Partition(layers, 2, 'memory', sample_inputs=tf.random.normal([32, 64]))
      except errors.ConfigError as e:
        print('ERROR', e)
      ''')
  assert result.returncode == 0, result.stderr[-2000:]
  message = result.stdout.split('ERROR ')[1].strip()
  assert '\n' not in message
  assert message.startswith("balance='memory' measures peak memory, but TensorFlow keeps no allocator statistics "
                            'for CPU:0 in this process')
  assert 'Call lingpipe.EnableAllocatorStats() (or set TF_CPU_ALLOCATOR_USE_BFC=true' in message
