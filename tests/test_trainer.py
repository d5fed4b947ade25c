"""The trainer in-process: train/eval/export/inspect/list, resume, and every user error as one clear line."""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from lingpipe import trainer
from lingpipe.logdir import checkpointer
import trainer_test_util as util

RunTrainer = util.RunTrainer
_Error = util.Error
FAST = util.FAST
FLAGS = util.FLAGS


def test_train_resume_eval_export_inspect(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  code, out, _ = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=10',
                            '--model_params_override=' + FAST)
  assert code == 0
  assert 'step 10/10 loss=' in out and 'steps/s=' in out and 'examples/s=' in out and 'eta=' in out
  assert sorted(f for f in os.listdir(os.path.join(logdir, 'train')) if f.endswith('.index')) == [
      'ckpt-10.index', 'ckpt-5.index']
  params_text = open(os.path.join(logdir, 'params.txt')).read()
  assert "model : 'synthetic.Mlp'" in params_text and 'task.train.max_steps : 10' in params_text
  assert any(f.startswith('events.out.tfevents') for f in os.listdir(os.path.join(logdir, 'train')))

  code, out, _ = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=15',
                            '--model_params_override=' + FAST)
  assert code == 0 and 'Resumed from %s/train/ckpt-10 at step 10.' % logdir in out and 'step 15/15' in out

  code, out, _ = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval')
  assert code == 0
  result = json.load(open(os.path.join(logdir, 'eval_test', 'metrics-15.json')))
  assert result['step'] == 15 and result['metrics']['num_examples'] == 1024
  assert 0.25 < result['metrics']['accuracy'] <= 1.0

  code, out, _ = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=export')
  export_dir = os.path.join(logdir, 'export', '15')
  assert code == 0 and export_dir in out
  # TF Serving's layout: the model's base path holds integer version folders, each a SavedModel; it serves the
  # highest and skips names that are not integers, such as the link from the old name.
  base = os.path.join(logdir, 'export')
  assert [int(d) for d in os.listdir(base) if d.isdigit()] == [15]
  assert {'saved_model.pb', 'variables'} <= set(os.listdir(export_dir))
  assert os.readlink(os.path.join(base, 'step_15')) == '15'
  serve = tf.saved_model.load(export_dir).signatures['serving_default']
  np.testing.assert_allclose(serve(features=tf.zeros([3, 16]))['probs'].numpy().sum(-1), 1.0, rtol=1e-5)
  # The README's REST request: TF Serving stacks the rows ("instances") into one batch per input.
  with open(os.path.join(os.path.dirname(__file__), '..', 'README.md'), encoding='utf-8') as f:
    request = json.loads(re.search(r"curl -d '(.*)' localhost:8501/v1/models/mlp:predict", f.read()).group(1))
  rows = request['instances']
  batch = {k: tf.constant([row[k] for row in rows], serve.structured_input_signature[1][k].dtype) for k in rows[0]}
  assert serve(**batch)['class_ids'].shape == [len(rows)]
  for wrong, got in ((tf.zeros([3, 5]), '[3 5]'), (tf.zeros([3, 16, 1]), '[3 16 1]'), (tf.zeros([16]), '[16]')):
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
      serve(features=wrong)
    assert 'Input `features` must have shape [batch, 16] (float32); got shape] %s' % got in str(e.value)

  code, out, _ = RunTrainer(capsys, '--model=synthetic.Mlp', '--mode=inspect')
  assert code == 0 and 'mlp/network/sub_0/w' in out and '16x64' in out and 'trainable parameters' in out

  assert 'does not decode' in _Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=decode')


def test_checkpoint_path_may_be_a_folder_or_an_export(capsys, tmp_path):
  """A train folder, a logdir and an export stand for their checkpoint; an export's variables restore without a
  step (they said the run had no complete checkpoint, and that a variable was missing)."""
  logdir = str(tmp_path / 'run')
  assert RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=10',
                    '--model_params_override=' + FAST)[0] == 0
  assert RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=export')[0] == 0
  metrics = []
  for path in ('train', '', 'export/10', 'export/10/variables/variables'):
    code, out, err = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval',
                                '--checkpoint_path=' + os.path.join(logdir, path))
    assert code == 0, err
    metrics.append(json.load(open(os.path.join(logdir, 'eval_test', 'metrics-10.json')))['metrics'])
  assert all(m == metrics[0] for m in metrics), metrics
  os.makedirs(os.path.join(logdir, 'empty'))
  assert _Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval',
                '--checkpoint_path=' + os.path.join(logdir, 'empty')).startswith(
                    '--checkpoint_path %s is a folder with no complete checkpoint' % os.path.join(logdir, 'empty'))


def test_relative_logdir(capsys, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  for mode in ('train', 'train', 'eval', 'export'):
    code, out, err = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=runs/mlp', '--max_steps=2',
                                '--mode=' + mode)
    assert code == 0, err
  assert 'Already at step 2' in RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=runs/mlp',
                                           '--max_steps=2')[1]
  assert os.path.isdir(tmp_path / 'runs' / 'mlp' / 'export' / '2')


def test_list_mode(capsys):
  code, out, _ = RunTrainer(capsys, '--mode=list')
  assert code == 0 and 'synthetic.Mlp' in out.split()


def test_unknown_model(capsys, tmp_path):
  line = _Error(capsys, '--model=synthetic.Mpl', '--logdir=%s' % tmp_path)
  assert line.startswith("Unknown model 'synthetic.Mpl'. Did you mean: synthetic.Mlp")


def test_misspelled_override_key(capsys, tmp_path):
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=%s' % tmp_path,
                '--model_params_override=task.train.learnin_rate=0.1')
  assert line == "task.train has no param 'learnin_rate'. Did you mean: learning_rate?"


def test_override_of_wrong_type(capsys, tmp_path):
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=%s' % tmp_path,
                '--model_params_override=input.batch_size=lots')
  assert line == "Param input.batch_size: cannot use 'lots'; expected an int >= 1 (current value 64)."


def test_missing_logdir(capsys):
  assert _Error(capsys, '--model=synthetic.Mlp').startswith('--logdir is required for --mode=train')


def test_params_file_override(capsys, tmp_path):
  path = tmp_path / 'overrides.txt'
  path.write_text('task.train.max_steps : 3\n')
  code, out, _ = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=%s' % (tmp_path / 'run'),
                            '--model_params_file_override=%s' % path)
  assert code == 0 and 'step 3/3' in out
  assert _Error(capsys, '--model=synthetic.Mlp', '--logdir=%s' % tmp_path,
                '--model_params_file_override=%s' % (tmp_path / 'nope.txt')).startswith(
                    '--model_params_file_override: no file')


def test_logdir_of_another_model_is_refused_untouched(capsys, tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  (logdir / 'params.txt').write_text("model : 'image.cifar10.AmoebaNetD'\n")
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=%s' % logdir)
  assert line.startswith('Logdir %s holds model image.cifar10.AmoebaNetD' % logdir) and 'nothing was changed' in line
  assert os.listdir(logdir) == ['params.txt']
  assert (logdir / 'params.txt').read_text() == "model : 'image.cifar10.AmoebaNetD'\n"


def test_checkpoint_of_a_changed_model_is_refused(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  assert RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=2')[0] == 0
  before = open(os.path.join(logdir, 'params.txt')).read()
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=4',
                '--model_params_override=task.network.sub[1].output_dim=32;task.softmax.input_dim=32')
  assert line.startswith('Checkpoint %s/train/ckpt-2 does not match this model' % logdir)
  assert open(os.path.join(logdir, 'params.txt')).read() == before


def _Truncate(path):
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)


def test_corrupt_newest_checkpoint_advice_works_and_training_falls_back(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  assert RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=4',
                    '--model_params_override=task.train.save_interval_steps=2')[0] == 0
  _Truncate(os.path.join(train_dir, 'ckpt-4.data-00000-of-00001'))
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval')
  assert line.startswith('Checkpoint %s/ckpt-4 (files: ckpt-4.data-00000-of-00001, ckpt-4.index) is corrupt or '
                         'truncated' % train_dir), line
  advice = '--checkpoint_path=%s/ckpt-2' % train_dir
  assert 'The newest checkpoint that restores is ckpt-2: pass %s to use it' % advice in line
  code, out, err = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval', advice)
  assert code == 0 and 'Eval of synthetic.Mlp at step 2' in out, err  # The advice works as written.

  code, out, err = RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=6')
  assert code == 0, err
  assert 'ckpt-4 (files: ckpt-4.data-00000-of-00001, ckpt-4.index) is corrupt or truncated' in out
  assert 'Moved its files to %s/corrupt.' % train_dir in out
  assert 'Resumed from %s/ckpt-2 at step 2.' % train_dir in out and 'step 6/6' in out
  assert sorted(os.listdir(os.path.join(train_dir, 'corrupt'))) == ['ckpt-4.data-00000-of-00001', 'ckpt-4.index']
  assert checkpointer.LatestCheckpoint(train_dir) == os.path.join(train_dir, 'ckpt-6')


@pytest.mark.slow
def test_a_lone_corrupt_checkpoint_is_kept_and_training_does_not_start_over(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  assert RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=2')[0] == 0
  _Truncate(os.path.join(train_dir, 'ckpt-2.data-00000-of-00001'))
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=4')
  assert line.startswith('No checkpoint in %s restores: ckpt-2 moved to %s/corrupt.' % (train_dir, train_dir))
  assert not [f for f in os.listdir(train_dir) if f.startswith('ckpt-')]
  os.remove(os.path.join(train_dir, 'corrupt', 'ckpt-2.index'))
  assert _Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval').startswith(
      'No complete checkpoint in %s: train first' % train_dir)


def test_nan_loss_stops_and_sets_aside_the_checkpoint_it_came_from(capsys, tmp_path):
  """Step 1 blows the weights up (its loss was finite) and is saved; step 2's loss is NaN. With no checkpoint
  before ckpt-1, a rerun starts over (tests/test_divergence.py has the case with one)."""
  logdir = str(tmp_path / 'run')
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=50',
                '--model_params_override=task.train.learning_rate=1e38;task.train.save_interval_steps=1')
  assert line.startswith('Step 2: loss nan, gradient norm nan is not finite; stopped without applying it. The '
                         'weights it started from are those of ckpt-1: moved to'), line
  assert 'No good checkpoint was written, so a rerun starts from step 0' in line, line
  train_dir = os.path.join(logdir, 'train')
  assert checkpointer.LatestCheckpoint(train_dir) is None
  assert sorted(os.listdir(os.path.join(train_dir, 'diverged'))) == ['ckpt-1.data-00000-of-00001', 'ckpt-1.index']
  assert RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=2')[0] == 0


def test_wrong_shape_names_layer(capsys, tmp_path):
  line = _Error(capsys, '--model=synthetic.Mlp', '--logdir=%s' % tmp_path,
                '--model_params_override=task.network.sub[1].input_dim=32')
  assert line == ('Layer mlp/network/sub_1 (ProjectionLayer): inputs must have rank >= 1 and last dimension 32; '
                  'got shape [64, 64].')


def test_verbose_shows_the_exception(tmp_path):
  FLAGS.unparse_flags()
  FLAGS(['lingpipe-train', '--model=nope.Nope', '--logdir=%s' % tmp_path, '--verbose'])
  with pytest.raises(ValueError, match="Unknown model 'nope.Nope'"):
    trainer.main(['lingpipe-train'])
