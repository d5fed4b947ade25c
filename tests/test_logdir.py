"""The logdir, in-process: one writer, a lost or stale index, params.txt, exact restores, permissions, full disks.

tests/test_faults.py runs the same faults through the binary, as a user meets them.
"""

import errno
import os
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import processes
from lingpipe.logdir import checkpointer
from lingpipe.logdir import logdir_lock
from lingpipe.logdir import safe_write
import trainer_test_util as util

MLP = '--model=synthetic.Mlp'
EVERY_2 = '--model_params_override=task.train.save_interval_steps=2'


def _Train(capsys, logdir, max_steps, *more):
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=%d' % max_steps, *more)
  assert code == 0, err
  return out


def _Index(train_dir):
  return open(os.path.join(train_dir, 'checkpoint')).read()


def test_a_second_writer_is_refused_with_the_holder_named_and_the_lock_dies_with_its_holder(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  with logdir_lock.LogdirLock(logdir):
    line = util.Error(capsys, MLP, '--logdir=' + logdir, '--max_steps=2')
    assert line.startswith('Logdir %s is being trained by pid %d on host ' % (logdir, os.getpid()))
    assert 'nothing was changed' in line
    assert os.listdir(logdir) == [logdir_lock.LOCK_FILE]
    _Train(capsys, str(tmp_path / 'other'), 2)  # Another logdir is free.
  _Train(capsys, logdir, 2)  # Released with its holder.


def test_a_refused_run_leaves_no_logdir_and_no_lock(capsys, tmp_path, monkeypatch):
  """A cluster refused (an unreachable worker, TF_CONFIG without a cluster) before anything is written, and a
  UserError inside the lock, leave nothing of the run: no logdir, no LOCK."""
  logdir = tmp_path / 'new' / 'run'
  line = util.Error(capsys, MLP, '--logdir=%s' % logdir, '--cluster_spec=worker=127.0.0.1:1')
  assert 'is unreachable' in line and not os.path.exists(tmp_path / 'new'), line
  monkeypatch.setenv('TF_CONFIG', '{}')
  assert util.Error(capsys, MLP, '--logdir=%s' % logdir) and not os.path.exists(tmp_path / 'new')
  monkeypatch.delenv('TF_CONFIG')
  with pytest.raises(errors.ConfigError):
    with logdir_lock.LogdirLock(str(logdir)):
      raise errors.ConfigError('refused')
  assert not os.path.exists(tmp_path / 'new')
  os.makedirs(logdir)
  open(logdir / 'mine.txt', 'w').close()
  with pytest.raises(errors.ConfigError):
    with logdir_lock.LogdirLock(str(logdir)):
      raise errors.ConfigError('refused')
  assert os.listdir(logdir) == ['mine.txt']  # Only what the run made is taken back.
  # Two trainers started at the same moment: the one refused as busy made the LOCK (or the folder) the holder
  # uses; the holder, refused next, takes back a logdir that holds nothing else.
  os.remove(logdir / 'mine.txt')
  open(logdir / logdir_lock.LOCK_FILE, 'w').close()
  with pytest.raises(errors.ConfigError):
    with logdir_lock.LogdirLock(str(logdir)):
      raise errors.ConfigError('refused')
  assert os.listdir(logdir) == []


@pytest.mark.slow  # A child process imports lingpipe: about 4 s.
def test_a_second_writer_says_the_holder_is_stopped(tmp_path):
  logdir = str(tmp_path / 'run')
  holder = subprocess.Popen([sys.executable, '-c', 'import sys, time\nfrom lingpipe.logdir import logdir_lock\n'
                             'logdir_lock.LogdirLock(sys.argv[1]).__enter__()\nprint("held", flush=True)\n'
                             'time.sleep(120)', logdir], stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    os.kill(holder.pid, signal.SIGSTOP)
    deadline = time.time() + 10
    while not processes.Stopped(holder.pid) and time.time() < deadline:  # The kernel stops it in a moment.
      time.sleep(0.01)
    with pytest.raises(errors.LogdirBusyError) as e:
      logdir_lock.LogdirLock(logdir).__enter__()
    assert 'which is stopped (SIGSTOP or Ctrl-Z; it holds on without progress: `kill -CONT %d` resumes it' % (
        holder.pid) in str(e.value), str(e.value)
    os.kill(holder.pid, signal.SIGCONT)
    with pytest.raises(errors.LogdirBusyError, match='which is running'):
      logdir_lock.LogdirLock(logdir).__enter__()
  finally:
    holder.kill()
    holder.wait()


def test_a_tilde_in_a_path_flag_is_the_home_folder(capsys, tmp_path, monkeypatch):
  """The shell expands no ~ after '=' (--logdir=~/run); a folder named '~' was made in the current one."""
  monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  monkeypatch.chdir(tmp_path)
  _Train(capsys, '~/run', 2)
  assert os.path.isdir(tmp_path / 'home' / 'run' / 'train') and not os.path.exists(tmp_path / '~')


def test_a_lost_index_is_rebuilt_from_the_disk_and_nothing_is_overwritten(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  keep_3 = EVERY_2 + ';task.train.checkpoints_to_keep=3'
  _Train(capsys, logdir, 6, keep_3)
  before = {f: os.path.getmtime(os.path.join(train_dir, f)) for f in os.listdir(train_dir) if f.startswith('ckpt-')}
  os.remove(os.path.join(train_dir, 'checkpoint'))
  assert checkpointer.LatestCheckpoint(train_dir) == os.path.join(train_dir, 'ckpt-6')  # Eval reads the disk.
  out = _Train(capsys, logdir, 8, keep_3)
  assert ('Checkpoints: the index is missing; rebuilt %s/checkpoint from the complete checkpoints on disk: ckpt-2, '
          'ckpt-4, ckpt-6.' % train_dir) in out
  assert 'Resumed from %s/ckpt-6 at step 6.' % train_dir in out
  for name, mtime in before.items():  # None was rewritten; ckpt-2 went by the usual rotation (keep 3).
    path = os.path.join(train_dir, name)
    if name.startswith('ckpt-2.'):
      assert not os.path.exists(path)
    else:
      assert os.path.getmtime(path) == mtime, name
  assert 'model_checkpoint_path: "ckpt-8"' in _Index(train_dir)


def test_a_checkpoint_saved_but_missing_from_the_index_is_adopted(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  _Train(capsys, logdir, 4, EVERY_2)
  checkpointer.WriteIndex(train_dir, [os.path.join(train_dir, 'ckpt-2')])  # As if killed before the index update.
  out = _Train(capsys, logdir, 6, EVERY_2)
  assert 'ckpt-4 is complete but missing from the index (a run killed while saving)' in out
  assert 'Resumed from %s/ckpt-4 at step 4.' % train_dir in out


def test_params_txt_describes_the_checkpoints_beside_it(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 4)
  params = os.path.join(logdir, 'params.txt')
  original = open(params).read()
  out = _Train(capsys, logdir, 4, '--model_params_override=task.train.learning_rate=0.5')
  assert 'nothing to train' in out and open(params).read() == original  # Nothing trained: nothing rewritten.
  out = _Train(capsys, logdir, 6, '--model_params_override=task.train.learning_rate=0.5')
  kept = os.path.join(logdir, 'params.step_4.txt')
  assert 'Params changed since step 4 (task.train.learning_rate, task.train.max_steps); the earlier ones are in ' \
         '%s.' % kept in out
  assert open(kept).read() == original
  assert 'task.train.learning_rate : 0.5' in open(params).read()


@pytest.mark.slow  # Two models trained and checked against each other's checkpoints: about 9 s.
def test_eval_of_another_models_checkpoint_names_the_variables_and_writes_nothing(capsys, tmp_path):
  deep = str(tmp_path / 'deep')
  code, _, err = util.RunTrainer(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + deep, '--max_steps=2')
  assert code == 0, err
  logdir = str(tmp_path / 'mlp')
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=eval', '--checkpoint_path=%s/train/ckpt-2' % deep)
  assert line.startswith('Checkpoint %s/train/ckpt-2 does not match this model: 12 variable(s) in the checkpoint but '
                         'not in this model (task/network/sub/2/b, task/network/sub/2/w, ' % deep), line
  assert not os.path.exists(logdir)
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=eval', '--checkpoint_path=%s/train/ckpt-3' % deep)
  assert line == 'There is no checkpoint %s/train/ckpt-3 (no files ckpt-3.*); %s/train has ckpt-2.' % (deep, deep)
  # The other way round: a model with more variables than the checkpoint.
  line = util.Error(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + deep, '--mode=export',
                    '--model_params_override=task.network.layers[7].output_dim=32;task.softmax.input_dim=32')
  assert '3 of other shapes (task/network/sub/7/b: checkpoint [64], model [32], ...)' in line


def test_written_files_follow_the_umask(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  old = os.umask(0o027)
  try:
    _Train(capsys, logdir, 2)
    assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=eval')[0] == 0
    assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export')[0] == 0
  finally:
    os.umask(old)
  mode = lambda *path: stat.S_IMODE(os.stat(os.path.join(logdir, *path)).st_mode)
  assert mode('params.txt') == 0o640 and mode('eval_test', 'metrics.json') == 0o640
  assert mode('export', '2') == 0o750 and mode('export', '2', 'saved_model.pb') == 0o640
  assert mode('export', '2', 'variables') == 0o750


def test_a_full_disk_is_one_line_leaves_no_litter_and_the_rerun_resumes(capsys, tmp_path, monkeypatch):
  """The write wrapper: the second save fails as TensorFlow fails on a full disk, after leaving its temp folder."""
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  real_save, saves = tf.train.CheckpointManager.save, []

  def FullAfterOne(manager, checkpoint_number=None, **kwargs):
    saves.append(int(checkpoint_number))
    if len(saves) == 2:
      os.makedirs(os.path.join(train_dir, 'ckpt-%d_temp' % saves[-1], 'part-00000-of-00001'))
      raise tf.errors.ResourceExhaustedError(None, None, 'ckpt-4_temp/part-00000-of-00001.data-00000-of-00001; No '
                                             'space left on device [Op:SaveV2]')
    return real_save(manager, checkpoint_number=checkpoint_number, **kwargs)

  monkeypatch.setattr(tf.train.CheckpointManager, 'save', FullAfterOne)
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--max_steps=6', EVERY_2)
  assert line.startswith('No space left on device writing checkpoint %s/ckpt-4 (' % train_dir)
  assert 'free on its filesystem; it needs about ' in line
  assert line.endswith('Nothing was lost and the partial files were removed. Free space and rerun the same '
                       'command: it resumes from %s/ckpt-2 (step 2).' % train_dir)
  assert sorted(os.listdir(train_dir))[:3] == ['checkpoint', 'ckpt-2.data-00000-of-00001', 'ckpt-2.index']
  assert not [f for f in os.listdir(train_dir) if 'temp' in f or f.startswith('ckpt-4')]
  monkeypatch.undo()
  assert 'Resumed from %s/ckpt-2 at step 2.' % train_dir in _Train(capsys, logdir, 6, EVERY_2)


def test_atomic_folders_and_files_turn_a_full_disk_into_one_error_and_keep_the_old_version(tmp_path):
  target = str(tmp_path / 'export')
  safe_write.AtomicWrite(os.path.join(target, 'old.txt'), 'old')
  with pytest.raises(errors.DiskFullError, match='No space left on device writing SavedModel %s' % target):
    with safe_write.AtomicDirectory(target, 'SavedModel') as tmp:
      open(os.path.join(tmp, 'half'), 'w').write('x')
      raise OSError(errno.ENOSPC, 'No space left on device')
  assert os.listdir(tmp_path) == ['export'] and os.listdir(target) == ['old.txt']
  assert safe_write.IsNoSpace(tf.errors.ResourceExhaustedError(None, None, 'x; No space left on device'))
  assert not safe_write.IsNoSpace(tf.errors.ResourceExhaustedError(None, None, 'OOM when allocating tensor'))
  np.testing.assert_equal(safe_write.Umask(), os.umask(safe_write.Umask()))
