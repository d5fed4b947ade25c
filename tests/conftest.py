"""Shared test set-up: quiet TensorFlow and four logical CPU devices for pipeline tests.

The devices must exist before TensorFlow initializes its runtime, so they are made here, when pytest imports this
file, before any test module runs an op.
"""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from lingpipe.core import cluster  # pylint: disable=g-import-not-at-top

NUM_TEST_DEVICES = 4
cluster.ConfigureLocalDevices(NUM_TEST_DEVICES, intra_op_threads=1, inter_op_threads=4)
