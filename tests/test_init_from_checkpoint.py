"""Fine-tuning: a fresh run initialized from another run's checkpoint, with a new head and name mapping."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.model import model_registry
from lingpipe.runners import init_from_checkpoint
from lingpipe.distributed import local_cluster
from lingpipe.runners import train_loop


def _Params(num_classes=4, steps=3):
  p = model_registry.GetParams('synthetic.Mlp', 'Train')
  p.input.num_classes = num_classes
  p.task.softmax.num_classes = num_classes
  p.task.train.max_steps = steps
  return p


def _Values(task):
  return {init_from_checkpoint.RelativeName(v): v.numpy() for v in task.variables}


def test_fine_tuning_copies_the_body_and_keeps_a_fresh_head(tmp_path):
  source_dir = str(tmp_path / 'source')
  train_loop.TrainLoop(_Params(), source_dir).Run()
  ckpt = os.path.join(source_dir, 'train', 'ckpt-3')
  source = _Values(train_loop.TrainLoop(_Params(), source_dir).task)  # Untrained: for comparison only.
  trained = init_from_checkpoint._SourceTask(ckpt)[0]  # pylint: disable=protected-access
  trained = _Values(trained)
  assert not np.array_equal(trained['network/sub_0/w'], source['network/sub_0/w'])

  p = _Params(num_classes=3, steps=0)
  p.task.train.init_from_checkpoint = ckpt
  p.task.train.init_from_checkpoint_exclude = ['^softmax/']
  loop = train_loop.TrainLoop(p, str(tmp_path / 'target'))
  fresh = _Values(loop.task)
  loop.Run()
  tuned = _Values(loop.task)
  for name in ('network/sub_0/w', 'network/sub_0/b', 'network/sub_1/w'):
    np.testing.assert_array_equal(tuned[name], trained[name])
  assert tuned['softmax/w'].shape == (64, 3)
  np.testing.assert_array_equal(tuned['softmax/w'], fresh['softmax/w'])

  # Without the exclusion the head's shape mismatch is an error naming it.
  p.task.train.init_from_checkpoint_exclude = []
  with pytest.raises(errors.CheckpointError, match=r'softmax/w \[64, 3\] \(source softmax/w is \[64, 4\]\)'):
    train_loop.TrainLoop(p, str(tmp_path / 'target2')).Run()
  # Rules map names: a deeper, pipelined model (8 hidden layers in 2 cells) grows from the 2-layer one, every
  # hidden layer after the first starting from the source's second.
  deep = model_registry.GetParams('synthetic.DeepMlpGPipe', 'Train')
  deep.task.train.max_steps = 0
  deep.task.train.init_from_checkpoint = ckpt
  deep.task.train.init_from_checkpoint_rules = [[r'^network/sub_[1-7]/', 'network/sub_1/']]
  loop = train_loop.TrainLoop(deep, str(tmp_path / 'deep'))
  loop.Run()
  grown = _Values(loop.task)
  for i in range(1, 8):
    np.testing.assert_array_equal(grown['network/sub_%d/w' % i], trained['network/sub_1/w'])
  np.testing.assert_array_equal(grown['softmax/w'], trained['softmax/w'])
  deep.task.train.init_from_checkpoint_rules = [[r'^network/sub_1/w', 'network/sub_9/w']]
  with pytest.raises(errors.CheckpointError, match='no source variable network/sub_9/w'):
    train_loop.TrainLoop(deep, str(tmp_path / 'deep2')).Run()


def test_init_from_a_checkpoint_outside_a_lingpipe_logdir_is_an_error(tmp_path):
  p = _Params(steps=0)
  p.task.train.init_from_checkpoint = str(tmp_path / 'elsewhere' / 'train' / 'ckpt-1')
  with pytest.raises(errors.CheckpointError, match=r'there is no checkpoint there \(no files ckpt-1\.\*\)'):
    train_loop.TrainLoop(p, str(tmp_path / 'target')).Run()
  tf.train.Checkpoint(v=tf.Variable(1.0)).write(p.task.train.init_from_checkpoint)
  with pytest.raises(errors.CheckpointError, match='params.txt'):
    train_loop.TrainLoop(p, str(tmp_path / 'target')).Run()
  (tmp_path / 'empty').mkdir()
  p.task.train.init_from_checkpoint = str(tmp_path / 'empty')
  with pytest.raises(errors.CheckpointError, match=r'init_from_checkpoint .*/empty is a folder with no complete'):
    train_loop.TrainLoop(p, str(tmp_path / 'target')).Run()


@pytest.mark.slow
def test_fine_tuning_on_a_worker_from_a_pipelined_run(tmp_path):
  """The source run (2 cells) is rebuilt on the run's own devices: one worker of one device (the source's K local
  devices were asked for, and the trainer of a cluster run has one)."""
  source = model_registry.GetParams('synthetic.DeepMlpGPipe', 'Train')
  source.task.train.max_steps = 2
  train_loop.TrainLoop(source, str(tmp_path / 'source')).Run()
  ckpt = os.path.join(str(tmp_path / 'source'), 'train', 'ckpt-2')
  with local_cluster.LocalCluster(1) as workers:
    done = subprocess.run(
        [sys.executable, '-m', 'lingpipe.trainer', '--cluster_spec=' + workers.spec_text, '--model=synthetic.Mlp',
         '--logdir=%s' % (tmp_path / 'target'), '--max_steps=0',
         "--model_params_override=task.train.init_from_checkpoint='%s'" % ckpt], capture_output=True, text=True,
        timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  assert 'Initialized 6 variables' in done.stdout, done.stdout
  assert 'from %s (model synthetic.DeepMlpGPipe)' % ckpt in done.stdout
