"""lingpipe never deletes what it did not write: every write path of lingpipe-train (checkpoints and their rotation,
params files, eval results, exports, decodes, profiles, the temporaries of killed writers) runs with a user's file
planted in, beside and below each of its targets; each write either leaves the user's files alone or is refused in
one line, and afterwards every planted file is there with its content."""

import os
import subprocess

import pytest

from lingpipe.logdir import temporaries
import trainer_test_util as util

pytestmark = pytest.mark.slow

MODEL = '--model=synthetic.DeepMlpGPipe'
MT = '--model=mt.multilingual.TransformerGPipe'


class _Planted:
  """The user's files: planted, then checked."""

  def __init__(self):
    self.files = {}

  def Around(self, folder):
    """A file in `folder`, one below it (in a folder of the user's), and one beside it."""
    for relative in ('users_notes.txt', os.path.join('users_folder', 'notes.txt'),
                     os.path.join('..', 'beside_%s.txt' % os.path.basename(folder))):
      self.At(os.path.normpath(os.path.join(folder, relative)))

  def At(self, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path):
      with open(path, 'w') as f:
        f.write('the user wrote %s' % path)
      self.files[path] = 'the user wrote %s' % path
    return path

  def Missing(self):
    missing = []
    for path, text in self.files.items():
      try:
        with open(path) as f:
          if f.read() != text:
            missing.append(path + ' (changed)')
      except OSError:
        missing.append(path)
    return missing


def _DeadPid():
  child = subprocess.Popen(['true'])
  child.wait()
  return child.pid


def test_every_write_path_leaves_the_users_files_alone(capsys, tmp_path):
  planted = _Planted()
  logdir = str(tmp_path / 'runs' / 'deep')
  run = ['--logdir=' + logdir, MODEL]
  train_dir = os.path.join(logdir, 'train')
  for folder in (logdir, train_dir):  # A logdir (and its train/) made by the user before training.
    planted.Around(folder)

  def Ok(*args):
    code, out, err = util.RunTrainer(capsys, *run, *args)
    assert code == 0, err
    return out

  def Refused(*args):
    before = planted.Missing()
    line = util.Error(capsys, *run, *args)
    assert planted.Missing() == before
    return line

  # Checkpoints, their rotation (one kept) and params.txt; then a resumed run with other params (params.step_N.txt,
  # params.pending.txt) after kills that left TensorFlow's and lingpipe's temporaries.
  Ok('--max_steps=3', '--model_params_override=task.train.save_interval_steps=1;task.train.checkpoints_to_keep=1')
  host, dead = temporaries.Name('x').rsplit('.tmp-', 1)[1].rsplit('-', 2)[0], _DeadPid()
  leftovers = [os.path.join(train_dir, 'checkpoint.tmp' + 'ab' * 16), os.path.join(train_dir, 'ckpt-9_temp'),
               os.path.join(logdir, '.params.txt.tmp-%s-%d-0123abcd' % (host, dead))]
  for path in leftovers:
    os.makedirs(path) if path.endswith('_temp') else open(path, 'w').close()
  Ok('--max_steps=5', '--model_params_override=task.train.learning_rate=0.01')
  assert os.path.exists(os.path.join(logdir, 'params.step_3.txt'))
  assert not [path for path in leftovers if os.path.lexists(path)]

  # Eval results, twice (metrics-N.json and metrics.json replaced).
  planted.Around(os.path.join(logdir, 'eval_test'))
  Ok('--mode=eval')
  Ok('--mode=eval')

  # Exports: the default version folder (its base folder holds the user's files too) and a folder of the user's.
  planted.Around(os.path.join(logdir, 'export'))
  Ok('--mode=export')
  version = os.path.join(logdir, 'export', '5')
  for inside in (os.path.join(version, 'users_notes.txt'), os.path.join(version, 'users_folder', 'notes.txt')):
    planted.At(inside)
    assert Refused('--mode=export').startswith('The export folder %s holds an earlier export' % version)
    moved = os.path.join(str(tmp_path), 'moved', os.path.basename(inside))  # The user takes it out, as told.
    os.renames(inside, moved)
    planted.files[moved] = planted.files.pop(inside)
  Ok('--mode=export')
  users_export = str(tmp_path / 'served' / 'deep')
  planted.Around(users_export)
  assert Refused('--mode=export', '--export_dir=' + users_export).startswith('--export_dir %s holds 2 entries' % (
      users_export))
  for target in (logdir, train_dir, os.path.join(logdir, 'export')):
    Refused('--mode=export', '--export_dir=' + target)

  # The profile's chart and trace.
  planted.Around(os.path.join(logdir, 'profile'))
  Ok('--mode=profile', '--profile_steps=1')

  # Decodes: decode_<dataset>/ and its step_N/ folder, replaced whole only when it holds nothing of the user's.
  mt_logdir = str(tmp_path / 'runs' / 'mt')
  code, _, err = util.RunTrainer(capsys, MT, '--logdir=' + mt_logdir, '--max_steps=1',
                                 '--model_params_override=task.max_decode_len=4')
  assert code == 0, err
  decode = [MT, '--logdir=' + mt_logdir, '--mode=decode', "--model_params_override=input.pairs=['de-en']"]
  planted.Around(os.path.join(mt_logdir, 'decode_test'))
  assert util.RunTrainer(capsys, *decode)[0] == 0
  step_dir = os.path.join(mt_logdir, 'decode_test', 'step_1')
  planted.At(os.path.join(step_dir, 'users_notes.txt'))
  line = util.Error(capsys, *decode)
  assert line.startswith('%s holds an earlier decode and also what lingpipe did not write there (users_notes.txt)'
                         % step_dir), line
  assert planted.Missing() == []
  assert len(planted.files) >= 20  # In, below and beside seven targets, and the ones moved out of an export.
