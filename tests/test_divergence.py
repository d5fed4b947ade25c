"""Weights that diverged, as a user meets them through lingpipe-train: the checkpoint whose weights give a non-finite
loss is set aside (kept, never deleted), a rerun with a sane learning rate trains on from the one before, and eval,
decode and export refuse non-finite weights and losses in one line."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.distributed import cluster
from lingpipe.model import model_registry
from lingpipe.runners import divergence
from lingpipe.runners import train_loop
import trainer_test_util as util

MLP = '--model=synthetic.Mlp'
EVERY_STEP = 'task.train.save_interval_steps=1;task.train.log_interval_steps=1'


def _Train(capsys, logdir, max_steps, override=EVERY_STEP):
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=%d' % max_steps,
                                   '--model_params_override=' + override)
  assert code == 0, err
  return out


def _Indexes(folder):
  return sorted(f for f in os.listdir(folder) if f.endswith('.index'))


@pytest.mark.slow  # Trains, diverges, resumes, evaluates and exports: about 10 s.
def test_a_diverged_checkpoint_is_set_aside_and_a_rerun_trains_on_from_the_one_before(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  _Train(capsys, logdir, 4)
  # Step 5 applies a learning rate that blows the weights up (saved as ckpt-5); step 6's loss from them is NaN.
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--max_steps=20',
                    '--model_params_override=%s;task.train.learning_rate=1e37' % EVERY_STEP)
  assert line.startswith('Step 6: loss nan, gradient norm nan is not finite; stopped without applying it. The '
                         'weights it started from are those of ckpt-5: moved to %s/diverged (kept, not deleted)' % (
                             train_dir)), line
  assert 'The last good checkpoint is %s/ckpt-4 (step 4), where a rerun trains on' % train_dir in line, line
  assert _Indexes(os.path.join(train_dir, 'diverged')) == ['ckpt-5.index']
  assert 'ckpt-5.index' not in _Indexes(train_dir) and 'ckpt-4.index' in _Indexes(train_dir)
  diverged = os.path.join(train_dir, 'diverged', 'ckpt-5')
  big = max(float(np.max(np.abs(tf.train.load_variable(diverged, name))))
            for name, _ in tf.train.list_variables(diverged) if name.startswith('task/'))
  assert big > 1e30  # Finite, but its loss is not: only a step from it could tell.

  # Eval, decode and export never pick it, nor take it when named.
  for mode in ('eval', 'export'):
    line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=' + mode, '--checkpoint_path=' + diverged)
    assert line.startswith('%s is in %s/diverged, where training set it aside (its weights gave a non-finite '
                           'loss)' % (diverged, train_dir)), line
  # A copy elsewhere: its eval's loss is NaN, which is refused in one line and writes nothing.
  copy = tmp_path / 'copy'
  copy.mkdir()
  for name in os.listdir(os.path.join(train_dir, 'diverged')):
    shutil.copy(os.path.join(train_dir, 'diverged', name), str(copy))
  before = set(os.listdir(os.path.join(logdir, 'eval_test'))) if os.path.isdir(
      os.path.join(logdir, 'eval_test')) else set()
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=eval', '--checkpoint_path=%s/ckpt-5' % copy)
  assert line.startswith('Eval of synthetic.Mlp at step 5 (%s/ckpt-5) on Test: loss=nan' % copy), line
  assert 'nothing was written' in line
  after = set(os.listdir(os.path.join(logdir, 'eval_test'))) if os.path.isdir(
      os.path.join(logdir, 'eval_test')) else set()
  assert after == before

  # The same command with a sane learning rate trains on from ckpt-4, for ever after too.
  out = _Train(capsys, logdir, 8)
  assert 'Resumed from %s/ckpt-4 at step 4.' % train_dir in out and 'step 8/8' in out, out
  # The same divergence again: the second ckpt-5 goes beside the first, which stays as it was.
  code, _, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=20',
                                 '--model_params_override=%s;task.train.learning_rate=1e37' % EVERY_STEP)
  assert code == 1 and 'ckpt-9: moved to' in err, err
  assert _Indexes(os.path.join(train_dir, 'diverged')) == ['ckpt-5.index', 'ckpt-9.index']
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export')
  assert code == 0 and 'at step 8 (from %s/ckpt-8)' % train_dir in out, out + err


def test_a_learning_rate_that_is_inf_is_refused_where_it_is_set(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--model_params_override=task.train.learning_rate=1e400')
  assert line == 'Param task.train.learning_rate: inf is not allowed; expected a finite number > 0.', line
  assert not os.path.exists(logdir)


def test_weights_that_are_not_finite_are_named():
  good, bad = tf.Variable([1.0, 2.0], name='good'), tf.Variable([1.0, np.inf], name='bad')
  steps = tf.Variable(3, dtype=tf.int64, name='steps')
  assert divergence.NonFinite([good, steps]) == []
  assert divergence.NonFinite([good, bad, steps]) == ['bad:0']
  with pytest.raises(errors.NonFiniteLossError, match=r'^Checkpoint x has 1 variable that is not finite \(bad:0\): '
                     r'pass an earlier one\.$'):
    divergence.CheckFinite([good, bad], 'Checkpoint x', 'pass an earlier one.')
  assert divergence.NonFiniteMetrics({'loss': float('nan'), 'accuracy': 0.5, 'x': float('inf')}) == ['loss', 'x']


@pytest.mark.slow  # A training, then an export and an eval refused: about 5 s.
def test_weights_that_are_not_finite_are_never_evaluated_or_exported(capsys, tmp_path):
  """A checkpoint holding an inf weight (training never saves one: TrainLoop.Save checks) is refused by export and
  eval in one line, before anything is written."""
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 2)
  p = model_registry.GetParams('synthetic.Mlp', 'Test')
  task = p.task.Instantiate()
  step = tf.Variable(2, dtype=tf.int64)
  tf.train.Checkpoint(step=step, task=task).read(os.path.join(logdir, "train", "ckpt-2")).expect_partial()
  weight = [v for v in task.variables if v.name == 'mlp/network/sub_0/w:0'][0]
  weight.assign(tf.fill(weight.shape, np.inf))
  saved = tf.train.Checkpoint(step=step, task=task).write(str(tmp_path / 'bad' / 'ckpt-2'))
  for mode in ('export', 'eval'):
    line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=' + mode, '--checkpoint_path=' + saved)
    assert line == ('Checkpoint %s has 1 variable that is not finite (mlp/network/sub_0/w:0): its weights diverged; '
                    'pass an earlier checkpoint with --checkpoint_path.' % saved), line
  assert not os.path.exists(os.path.join(logdir, 'export'))
  assert not os.path.exists(os.path.join(logdir, 'eval_test'))


def test_weights_that_are_not_finite_are_not_saved(tmp_path):
  """An update can make a weight inf while the loss it came from was finite: the save refuses it in one line, and
  writes nothing (no checkpoint, no params.txt)."""
  p = model_registry.GetParams('synthetic.Mlp', 'Train')
  with cluster.Use(cluster.Cluster.FromParams(p.cluster, 1)):
    loop = train_loop.TrainLoop(p, str(tmp_path / 'run'), out=open(os.devnull, 'w'))
    assert loop.Restore() is None
    weight = [v for v in loop.task.variables if v.name == 'mlp/network/sub_1/b:0'][0]
    weight.assign(tf.fill(weight.shape, np.nan))
    with pytest.raises(errors.NonFiniteLossError, match=r'^The model after step 0 has 1 variable that is not finite '
                       r'\(mlp/network/sub_1/b:0\): not saved; no checkpoint was written yet'):
      loop.Save()
  assert not os.path.exists(tmp_path / 'run')  # Neither a checkpoint nor params.txt.
