"""DropoutLayer: off in eval, scaled in training, deterministic masks under a step seed."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.layers import dropout
from layer_test_util import Build, CheckMeta


def test_identity_in_eval_and_at_keep_prob_one():
  x = tf.ones([4, 8])
  np.testing.assert_array_equal(Build(dropout.DropoutLayer, keep_prob=0.5).FProp(x), x)
  with context.Training(True):
    np.testing.assert_array_equal(Build(dropout.DropoutLayer, keep_prob=1.0).FProp(x), x)
  CheckMeta(Build(dropout.DropoutLayer, keep_prob=0.5), np.ones([2, 2], np.float32))


def test_training_drops_and_rescales():
  with context.Training(True):
    out = Build(dropout.DropoutLayer, keep_prob=0.75).FProp(tf.ones([100, 100])).numpy()
  assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
  assert abs((out > 0).mean() - 0.75) < 0.02


def test_deterministic_masks_repeat_for_a_step_and_change_across_steps():
  layer = Build(dropout.DropoutLayer, keep_prob=0.5, deterministic=True)
  x = tf.ones([32, 32])
  with context.Training(True):
    with context.StepSeed(3):
      a, b = layer.FProp(x).numpy(), layer.FProp(x).numpy()
    with context.StepSeed(4):
      c = layer.FProp(x).numpy()
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  other_seed = Build(dropout.DropoutLayer, keep_prob=0.5, deterministic=True, random_seed=5)
  with context.Training(True), context.StepSeed(3):
    assert not np.array_equal(a, other_seed.FProp(x).numpy())


def test_broadcast_dims_share_the_mask():
  layer = Build(dropout.DropoutLayer, keep_prob=0.5, noise_shape_broadcast_dims=[1])
  with context.Training(True):
    out = layer.FProp(tf.ones([16, 8])).numpy()
  assert all(len(set(row)) == 1 for row in out)


def test_errors():
  with pytest.raises(errors.ConfigError, match=r'keep_prob must be in \(0, 1\]'):
    Build(dropout.DropoutLayer, keep_prob=0.0)
