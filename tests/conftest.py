"""Shared test set-up: quiet TensorFlow, the binaries' process-wide choices, CPU allocator statistics and four
logical CPU devices for pipeline tests.

All are settings TensorFlow reads when it loads or its runtime starts, so they are made here, when pytest imports
this file, before any test module runs an op. The tests make the call the binaries make (process_setup.py), so they
run the kernels the binaries get (oneDNN on unless
TF_ENABLE_ONEDNN_OPTS=0). Allocator statistics (memory_stats.py) are what the remat memory test and
balance='memory' read; without them a stock tensorflow-cpu with oneDNN off keeps none.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from lingpipe import process_setup  # pylint: disable=g-import-not-at-top

process_setup.SetUpProcess()  # Before TensorFlow loads.

import pytest  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top

NUM_TEST_DEVICES = 4
cluster.ConfigureLocalDevices(NUM_TEST_DEVICES, intra_op_threads=1, inter_op_threads=4)


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
