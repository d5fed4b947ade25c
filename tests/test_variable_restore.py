"""A restore reads and assigns one variable at a time, matches exactly before it assigns, and restores what is not
a variable (an input's position) as TensorFlow does."""

import os

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import memory_stats
from lingpipe.logdir import variable_restore

_SIZE = 1 << 20  # floats a variable: 4 MiB


class _Model(tf.Module):

  def __init__(self, count=6, value=0.0, extra=False):
    super().__init__()
    self.layers = [tf.Variable(tf.fill([_SIZE], value + i)) for i in range(count)]
    self.named = {'a/b.c': tf.Variable(value)}  # a name TensorFlow escapes in a checkpoint key
    if extra:
      self.bias = tf.Variable(1.0)


def _Saved(tmp_path, **children):
  return tf.train.Checkpoint(**children).write(os.path.join(str(tmp_path), 'ckpt'))


def test_restores_every_value_and_escaped_names(tmp_path):
  path = _Saved(tmp_path, task=_Model(value=1.0), step=tf.Variable(7, dtype=tf.int64))
  model, step = _Model(), tf.Variable(0, dtype=tf.int64)
  variable_restore.Restore(tf.train.Checkpoint(task=model, step=step), path, exact=True)
  assert int(step.numpy()) == 7
  assert float(model.named['a/b.c'].numpy()) == 1.0
  for i, v in enumerate(model.layers):
    np.testing.assert_array_equal(v.numpy()[:3], [1.0 + i] * 3)


def test_holds_one_variable_at_a_time(tmp_path):
  memory_stats.CheckAvailable('CPU:0', 'This test')
  path = _Saved(tmp_path, task=_Model(value=1.0))
  root = tf.train.Checkpoint(task=_Model())
  peak = memory_stats.PeakBytes(lambda: variable_restore.Restore(root, path, exact=True))
  # TensorFlow's own restore reads all six (24 MiB) before assigning any.
  assert peak < 2.5 * 4 * _SIZE, 'peak %.1f MiB' % (peak / 2**20)


def test_a_mismatch_assigns_nothing_and_names_the_variables(tmp_path):
  path = _Saved(tmp_path, task=_Model(value=1.0))
  model = _Model(count=5, value=-1.0)
  with pytest.raises(errors.CheckpointError, match=r'1 variable\(s\) in the checkpoint but not in this model '
                     r'\(task/layers/5/'):
    variable_restore.Restore(tf.train.Checkpoint(task=model), path, exact=True)
  assert float(model.layers[0].numpy()[0]) == -1.0
  other = _Model(value=-1.0, extra=True)
  with pytest.raises(errors.CheckpointError, match=r'1 variable\(s\) not in the checkpoint \(task/bias/'):
    variable_restore.Restore(tf.train.Checkpoint(task=other), path, exact=False)
  shaped = _Model(value=-1.0)
  shaped.named['a/b.c'] = tf.Variable([0.0, 0.0])
  with pytest.raises(errors.CheckpointError, match=r'another shape or dtype \(task/named/a\.Sb\.\.c/.*'
                     r'checkpoint float32 \[\], model float32 \[2\]'):
    variable_restore.Restore(tf.train.Checkpoint(task=shaped), path, exact=False)
  assert float(shaped.layers[0].numpy()[0]) == -1.0


def test_not_exact_leaves_the_checkpoints_other_variables(tmp_path):
  path = _Saved(tmp_path, task=_Model(value=1.0), step=tf.Variable(7, dtype=tf.int64))
  model = _Model()
  variable_restore.Restore(tf.train.Checkpoint(task=model), path, exact=False)
  assert float(model.layers[1].numpy()[0]) == 2.0


def test_an_iterators_position_is_restored_with_it(tmp_path):
  iterator = iter(tf.data.Dataset.range(10))
  next(iterator), next(iterator)
  path = _Saved(tmp_path, task=_Model(count=1, value=1.0), input=iterator)
  fresh = iter(tf.data.Dataset.range(10))
  model = _Model(count=1)
  variable_restore.Restore(tf.train.Checkpoint(task=model, input=fresh), path, exact=True)
  assert int(next(fresh).numpy()) == 2
  assert float(model.layers[0].numpy()[0]) == 1.0
