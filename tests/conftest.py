"""Shared test set-up: quiet TensorFlow, the binaries' process-wide choices, CPU allocator statistics and four
logical CPU devices for pipeline tests.

All are settings TensorFlow reads when it loads or its runtime starts, so they are made here, when pytest imports
this file, before any test module runs an op. The tests make the named calls the binaries make (docs/guide.md, "What
lingpipe changes in TensorFlow"), so they run the kernels the binaries get (oneDNN on unless
TF_ENABLE_ONEDNN_OPTS=0). Allocator statistics (memory_stats.py) are what the remat memory test and
balance='memory' read; without them a stock tensorflow-cpu with oneDNN off keeps none.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top

cpu_kernels.PreferOneDnn()  # Before TensorFlow loads.

from lingpipe import native_log  # pylint: disable=g-import-not-at-top

native_log.ImportTensorFlow()  # Without its start-up notices, which print at every log level.

import pytest  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from lingpipe.core import memory_stats  # pylint: disable=g-import-not-at-top
from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top

NUM_TEST_DEVICES = 4
memory_stats.EnableAllocatorStats()
cluster.ConfigureLocalDevices(NUM_TEST_DEVICES, intra_op_threads=1, inter_op_threads=4)
pipelining_layer.DisableFunctionSpecialization()


@pytest.fixture(autouse=True)
def _no_global_seed_leaks_into_the_next_test():
  """Clears TensorFlow's global seed after each test.

  `keras.utils.set_random_seed` (test_keras.py) sets it, and a global seed changes what every op-level seed draws,
  `Dataset.shuffle(seed=input.seed)` included: a later in-process reference run would read its batches in another
  order than the same run in a subprocess (test_multiprocess.py failed that way in the full suite).
  """
  yield
  tf.random.set_seed(None)


def pytest_collection_modifyitems(items):
  """Runs the slow (end-to-end) tests first, in their usual order: with -n 2 the long ones start early and the
  short ones fill in around them, rather than a long one running alone at the end."""
  items.sort(key=lambda item: item.get_closest_marker('slow') is None)
