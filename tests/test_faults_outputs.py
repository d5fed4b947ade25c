"""What eval, decode and export write, as a user meets it: an export never deletes what lingpipe did not write and
replaces an earlier export whole, killed writers leave nothing that lasts, eval beside a training run that rotates
its checkpoints works, and results are printed before they are written."""

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.logdir import checkpointer
from lingpipe.runners import decoder
from lingpipe.logdir import safe_write
from lingpipe.logdir import temporaries
import trainer_test_util as util

MLP = '--model=synthetic.Mlp'
TRAINER = [sys.executable, '-m', 'lingpipe.trainer']


def _Tree(path):
  """{relative path: bytes} of every file under `path`."""
  tree = {}
  for root, _, files in os.walk(path):
    for f in files:
      full = os.path.join(root, f)
      with open(full, 'rb') as fh:
        tree[os.path.relpath(full, path)] = fh.read()
  return tree


def _DeadPid():
  """A pid that no process has (a child that has exited and been reaped)."""
  child = subprocess.Popen(['true'])
  child.wait()
  return child.pid


@pytest.mark.slow
def test_export_refuses_every_folder_that_is_not_empty_or_an_export_of_the_same_model(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  code, _, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=2')
  assert code == 0, err
  before = _Tree(logdir)
  mine = tmp_path / 'mine'
  mine.mkdir()
  (mine / 'notes.txt').write_text('keep me')
  cases = {
      logdir: '--export_dir %s is the logdir of a training run (its params.txt and checkpoints); nothing was '
              'written.' % logdir,
      os.path.join(logdir, 'train'): '--export_dir %s/train is inside the checkpoints of the logdir %s;' % (
          logdir, logdir),
      os.path.join(logdir, 'train', 'new'): '--export_dir %s/train/new is inside the checkpoints of the logdir' % (
          logdir),
      str(mine): '--export_dir %s holds 1 entry (notes.txt), not an earlier export of synthetic.Mlp; nothing was '
                 'written or deleted.' % mine,
      str(mine / 'notes.txt'): '--export_dir %s/notes.txt is a file, not a folder; nothing was written.' % mine,
  }
  for export_dir, expected in cases.items():
    line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=export', '--export_dir=' + export_dir)
    assert line.startswith(expected), line
  assert _Tree(logdir) == before and _Tree(str(mine)) == {'notes.txt': b'keep me'}
  assert sorted(os.listdir(tmp_path)) == ['mine', 'run']
  # An empty folder takes an export; the same model's export there is replaced; another model's is refused.
  target = tmp_path / 'serving'
  target.mkdir()
  for _ in range(2):
    code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export', '--export_dir=%s' % target)
    assert code == 0 and 'to %s with signatures' % target in out, err
  assert sorted(os.listdir(tmp_path)) == ['mine', 'run', 'serving']  # No temporaries left beside it.
  assert tf.saved_model.load(str(target)).signatures['serving_default'] is not None
  deep = str(tmp_path / 'deep')
  code, _, err = util.RunTrainer(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + deep, '--max_steps=1')
  assert code == 0, err
  line = util.Error(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + deep, '--mode=export',
                    '--export_dir=%s' % target)
  assert line.startswith('--export_dir %s holds an export of another model (synthetic.Mlp)' % target), line


def test_a_killed_writers_temporaries_are_removed_and_a_half_swapped_export_put_back(tmp_path):
  dead, host = _DeadPid(), temporaries.Name('x').rsplit('.tmp-', 1)[1].rsplit('-', 2)[0]
  (tmp_path / 'step_5').mkdir()
  (tmp_path / ('.step_5.tmp-%s-%d-0123abcd' % (host, dead))).mkdir()  # A SavedModel being filled.
  (tmp_path / ('.metrics.json.tmp-%s-%d-89abcdef' % (host, dead))).write_text('{')
  (tmp_path / ('.step_6.old-%s-%d-00000000' % (host, dead))).mkdir()  # Set aside; step_6 itself missing.
  (tmp_path / ('.step_6.old-%s-%d-00000000' % (host, dead)) / 'saved_model.pb').write_text('old')
  live = '.metrics.json.tmp-%s-%d-11111111' % (host, os.getppid())  # A writer that still runs.
  (tmp_path / live).write_text('{')
  other_host = '.metrics.json.tmp-elsewhere-%d-22222222' % dead  # Only its own host can tell whether it runs.
  (tmp_path / other_host).write_text('{')
  (tmp_path / '.step_7-abc').mkdir()  # Not a lingpipe temporary name: never touched.
  assert len(temporaries.RemoveLeftovers(str(tmp_path))) == 3
  assert sorted(os.listdir(tmp_path)) == sorted([live, other_host, '.step_7-abc', 'step_5', 'step_6'])
  assert (tmp_path / 'step_6' / 'saved_model.pb').read_text() == 'old'


def test_swapping_a_folder_in_leaves_the_old_or_the_new_one_whole(tmp_path):
  target, new = tmp_path / 'step_1', tmp_path / 'new'
  target.mkdir()
  (target / 'a').write_text('old')
  new.mkdir()
  (new / 'a').write_text('new')
  temporaries.SwapInto(str(new), str(target))
  assert os.listdir(tmp_path) == ['step_1'] and (target / 'a').read_text() == 'new'


@pytest.mark.slow
def test_an_export_killed_while_writing_leaves_the_previous_one_and_the_next_export_cleans_up(tmp_path):
  logdir, export_dir = str(tmp_path / 'run'), str(tmp_path / 'export')
  args = TRAINER + ['--model=synthetic.DeepMlpGPipe', '--logdir=' + logdir]
  assert subprocess.run(args + ['--max_steps=1'], capture_output=True).returncode == 0
  assert subprocess.run(args + ['--mode=export', '--export_dir=' + export_dir], capture_output=True).returncode == 0
  before = _Tree(export_dir)
  writer = subprocess.Popen(args + ['--mode=export', '--export_dir=' + export_dir], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
  deadline = time.time() + 120
  while time.time() < deadline and not any('.tmp-' in f for f in os.listdir(tmp_path)):
    time.sleep(0.005)
  writer.send_signal(signal.SIGKILL)
  writer.wait()
  assert any('.export.tmp-' in f for f in os.listdir(tmp_path)), os.listdir(tmp_path)  # Killed mid-write...
  assert _Tree(export_dir) == before  # ...and the previous export is whole.
  result = subprocess.run(args + ['--mode=export', '--export_dir=' + export_dir], capture_output=True, text=True)
  assert result.returncode == 0, result.stderr
  assert sorted(os.listdir(tmp_path)) == ['export', 'run'], os.listdir(tmp_path)


def test_eval_retries_with_the_newest_checkpoint_when_training_rotates_its_own_away(capsys, tmp_path,
                                                                                     monkeypatch):
  logdir = str(tmp_path / 'run')
  code, _, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=4',
                                 '--model_params_override=task.train.save_interval_steps=2')
  assert code == 0, err
  real_check = checkpointer.CheckTaskVariables
  rotated = []

  def RotatedWhileRead(root, path):
    if not rotated:  # The first checkpoint read is deleted meanwhile, as a training run's rotation does.
      rotated.append(path)
      for f in checkpointer.CheckpointFiles(path):
        os.remove(f)
    return real_check(root, path)

  monkeypatch.setattr(checkpointer, 'CheckTaskVariables', RotatedWhileRead)
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=eval')
  assert code == 0, err
  assert rotated == [os.path.join(logdir, 'train', 'ckpt-4')]
  assert '%s was rotated away by training while it was read; using the newest checkpoint again.' % rotated[0] in out
  assert 'at step 2' in out and 'corrupt' not in out + err
  # Named explicitly, a checkpoint deleted while read is said to be deleted, not corrupt.
  rotated.clear()
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=eval',
                    '--checkpoint_path=%s/train/ckpt-2' % logdir)
  assert line.startswith('Checkpoint %s/train/ckpt-2 was deleted while it was read (' % logdir), line
  assert 'corrupt' not in line


@pytest.mark.slow
def test_eval_and_export_beside_a_training_run_that_keeps_one_checkpoint(tmp_path):
  logdir = str(tmp_path / 'run')
  trainer = subprocess.Popen(TRAINER + [MLP, '--logdir=' + logdir, '--max_steps=100000000',
                                        '--model_params_override=task.train.save_interval_steps=1;'
                                        'task.train.checkpoints_to_keep=1;task.train.log_interval_steps=100000'],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(os.path.join(logdir, 'train', 'checkpoint')):
      time.sleep(0.1)
    for mode in ('eval', 'eval', 'export'):  # Before the fix 7 evals in 8 failed.
      result = subprocess.run(TRAINER + [MLP, '--logdir=' + logdir, '--mode=' + mode], capture_output=True,
                              text=True, timeout=300)
      assert result.returncode == 0, result.stderr
  finally:
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()


def test_eval_prints_its_metrics_before_it_writes_them(capsys, tmp_path, monkeypatch):
  logdir = str(tmp_path / 'run')
  assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=2')[0] == 0

  def ReadOnly(path, what):
    raise safe_write.WriteError(what, path, OSError(errno.EROFS, 'Read-only file system', os.path.dirname(path)))

  monkeypatch.setattr(safe_write, '_Prepare', ReadOnly)
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=eval')
  assert code == 1 and 'Eval of synthetic.Mlp at step 2 on Test' in out and 'accuracy=' in out
  assert err == ('lingpipe-train: error: Cannot write metrics %s/eval_test/metrics-2.json: Read-only file system '
                 '(%s/eval_test).\n' % (logdir, logdir)), err


def _Plant(root, relative, is_dir=False):
  """A user's file (or empty folder, or symlink if `relative` ends in '@') at `relative` under `root`."""
  path = os.path.join(root, relative.rstrip('/@'))
  os.makedirs(os.path.dirname(path), exist_ok=True)
  if relative.endswith('@'):
    os.symlink('/etc/hostname', path)
  elif relative.endswith('/') or is_dir:
    os.makedirs(path)
  else:
    with open(path, 'w') as f:
      f.write('the user wrote this')
  return path


_PLANTED = [  # (what the user put in an earlier export, how the refusal names it)
    ('NOTES.txt', 'NOTES.txt'), ('.notes', '.notes'), ('mine/', 'mine/'), ('deep/er/notes', 'deep/'),
    ('variables/mine.txt', 'variables/mine.txt'), ('variables/variables.index.bak', 'variables/variables.index.bak'),
    ('assets/extra.model', 'assets/extra.model'), ('assets/sub/', 'assets/sub/'), ('link@', 'link'),
    ('finetune/train/ckpt-1.index', 'finetune/')]


def test_a_reexport_is_refused_when_the_earlier_export_holds_anything_an_export_does_not_write(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=2')[0] == 0
  for export_args, target, shown in (([], os.path.join(logdir, 'export', '2'), 'The export folder %s'),
                                     (['--export_dir=%s' % (tmp_path / 'served')], str(tmp_path / 'served'),
                                      '--export_dir %s')):
    code, _, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export', *export_args)
    assert code == 0, err
    for planted, named in _PLANTED:
      path = _Plant(target, planted)
      before = _Tree(str(tmp_path))
      line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=export', *export_args)
      assert line == ('%s holds an earlier export of synthetic.Mlp and also what lingpipe did not write there (%s); '
                      'nothing was written or deleted. Move it out, or write elsewhere.' % (shown % target, named))
      assert _Tree(str(tmp_path)) == before and os.path.lexists(path)
      if named.endswith('/'):
        shutil.rmtree(os.path.join(target, named))
      else:
        os.remove(path)
    # With the user's things moved out, the earlier export is replaced.
    assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export', *export_args)[0] == 0


def test_an_export_into_the_exports_base_folder_or_inside_an_export_is_refused(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=2')[0] == 0
  base = os.path.join(logdir, 'export')
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=export', '--export_dir=' + base)
  assert line.startswith("--export_dir %s is the base folder of the logdir's exports (TF Serving's model base path), "
                         'where each export is a version folder %s/<step>; nothing was written.' % (base, base)), line
  assert not os.path.exists(base)
  assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export')[0] == 0
  for inside in (os.path.join(base, '2', 'variables', 'x'), os.path.join(base, '2', 'new')):
    line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=export', '--export_dir=' + inside)
    assert line == ('--export_dir %s is inside the export %s; nothing was written. Give a folder outside it.' % (
        inside, os.path.join(base, '2'))), line
  assert sorted(os.listdir(base)) == ['2', 'step_2']


def test_an_export_dir_that_is_a_symlink_is_written_through_and_stays_a_link(capsys, tmp_path):
  logdir, target, link = str(tmp_path / 'run'), tmp_path / 'disk' / 'models', tmp_path / 'served'
  assert util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=2')[0] == 0
  target.mkdir(parents=True)
  os.symlink(str(target), str(link))
  for _ in range(2):  # Into the empty target, then over the earlier export there.
    code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export', '--export_dir=%s' % link)
    assert code == 0 and "to %s (the link's target %s)" % (link, target) in out, err
    assert os.path.islink(str(link)) and os.readlink(str(link)) == str(target)
    assert tf.saved_model.load(str(target)).signatures['serving_default'] is not None
  os.symlink(str(tmp_path / 'gone'), str(tmp_path / 'broken'))
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=export', '--export_dir=%s' % (tmp_path / 'broken'))
  assert line.startswith('--export_dir %s is a broken symlink (to %s); nothing was written.' % (
      tmp_path / 'broken', tmp_path / 'gone')), line


def test_a_redecode_is_refused_when_the_earlier_decode_holds_what_a_decode_does_not_write(tmp_path):
  step_dir = tmp_path / 'decode_test' / 'step_5'
  step_dir.mkdir(parents=True)
  decoder.CheckStepDir(str(step_dir))  # Empty: fine.
  (step_dir / 'metrics.json').write_text('{"files": ["de-en.hyp"]}')
  (step_dir / 'de-en.hyp').write_text('hallo\n')
  decoder.CheckStepDir(str(step_dir))  # An earlier decode: replaced whole.
  for planted in ('fr-en.hyp', 'notes.txt', 'sub/'):
    path = _Plant(str(step_dir), planted)
    with pytest.raises(errors.ConfigError, match=r'^%s holds an earlier decode and also what lingpipe did not write '
                       r'there \(%s\); nothing was written or deleted\.' % (re.escape(str(step_dir)), planted)):
      decoder.CheckStepDir(str(step_dir))
    (os.rmdir if os.path.isdir(path) else os.remove)(path)


_EXPORT_TO_MOUNT = '''
set -u
mount -t tmpfs -o size=64m tmpfs "$1/mnt"
%s --model=synthetic.Mlp --logdir="$1/run" --mode=export --export_dir="$1/mnt"; echo "rc=$?"
%s --model=synthetic.Mlp --logdir="$1/run" --mode=export --export_dir="$1/mnt/1"; echo "rc=$?"
echo "inside:" $(ls "$1/mnt/1") ":end"
''' % (' '.join(TRAINER), ' '.join(TRAINER))


@pytest.mark.slow
def test_an_export_dir_that_is_a_mount_point_is_one_line_naming_a_folder_inside(capsys, tmp_path):
  if not shutil.which('unshare') or subprocess.run(['unshare', '-rm', 'true'], capture_output=True).returncode:
    pytest.skip('no mount namespace here (unshare -rm)')
  assert util.RunTrainer(capsys, '--model=synthetic.Mlp', '--logdir=%s' % (tmp_path / 'run'), '--max_steps=2')[0] == 0
  (tmp_path / 'mnt').mkdir()
  result = subprocess.run(['unshare', '-rm', 'sh', '-c', _EXPORT_TO_MOUNT, 'sh', str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
  first, second = result.stdout.split('rc=')[1:3]
  assert first.startswith('1') and second.startswith('0'), result.stdout + result.stderr
  assert ('lingpipe-train: error: --export_dir %s/mnt is a mount point; nothing was written. An export is written '
          'beside its folder and renamed into place, which a mount point cannot take: give a folder inside it, e.g. '
          '%s/mnt/1.' % (tmp_path, tmp_path)) in result.stderr.splitlines(), result.stderr
  assert 'saved_model.pb' in result.stdout.split('inside:')[1]
