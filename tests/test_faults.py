"""Faults as a user meets them, through the binary: a lost index, two writers, another model's checkpoint, a corrupt
checkpoint, a killed launcher, a full disk, and memory balancing in a fresh process with no TF_* variables."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from lingpipe.core import memory_stats

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = [sys.executable, '-m', 'lingpipe.trainer']
SAVE_EVERY_100 = ('--model_params_override=task.train.save_interval_steps=100;task.train.log_interval_steps=100000;'
                  'task.train.checkpoints_to_keep=3')


def _Run(*args, env=None):
  return subprocess.run(TRAINER + list(args), capture_output=True, text=True, timeout=300, env=env)


def _OneLineError(result):
  assert result.returncode == 1, result.stdout + result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('lingpipe-train: error: '), result.stderr
  return lines[0][len('lingpipe-train: error: '):]


def _WaitFor(predicate, timeout_s=120):
  deadline = time.time() + timeout_s
  while time.time() < deadline:
    if predicate():
      return True
    time.sleep(0.2)
  return False


def test_a_lost_index_resumes_from_the_newest_checkpoint_and_overwrites_nothing(tmp_path):
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  assert _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=400', SAVE_EVERY_100).returncode == 0
  kept = {f: os.path.getmtime(os.path.join(train_dir, f)) for f in os.listdir(train_dir) if f.startswith('ckpt-')}
  assert sorted(kept) == ['ckpt-%d.%s' % (s, e) for s in (200, 300, 400) for e in ('data-00000-of-00001', 'index')]
  os.remove(os.path.join(train_dir, 'checkpoint'))
  result = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=500', SAVE_EVERY_100)
  assert result.returncode == 0, result.stderr
  assert 'Resumed from %s/ckpt-400 at step 400.' % train_dir in result.stdout
  assert 'rebuilt %s/checkpoint from the complete checkpoints on disk: ckpt-200, ckpt-300, ckpt-400.' % train_dir \
      in result.stdout
  for name in kept:  # ckpt-200 left by the usual rotation (keep 3); the others untouched.
    path = os.path.join(train_dir, name)
    assert (not os.path.exists(path)) if '-200.' in name else os.path.getmtime(path) == kept[name]


def test_a_second_writer_exits_1_naming_the_first_and_eval_may_run_meanwhile(tmp_path):
  logdir = str(tmp_path / 'run')
  first = subprocess.Popen(TRAINER + ['--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=10000000',
                                      SAVE_EVERY_100], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    assert _WaitFor(lambda: os.path.exists(os.path.join(logdir, 'train', 'checkpoint'))), first.stderr
    second = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=10000000', '--seed=5')
    line = _OneLineError(second)
    assert line.startswith('Logdir %s is being trained by pid %d on host ' % (logdir, first.pid)), line
    evaluated = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval')
    assert evaluated.returncode == 0 and 'Eval of synthetic.Mlp at step' in evaluated.stdout, evaluated.stderr
    assert "input.seed : 5" not in open(os.path.join(logdir, 'params.txt')).read()
  finally:
    first.send_signal(signal.SIGKILL)
    first.wait()
  # kill -9 leaves no stale lock: the same command resumes.
  resumed = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=1', SAVE_EVERY_100)
  assert resumed.returncode == 0 and 'Resumed from' in resumed.stdout, resumed.stderr


def test_eval_of_another_models_checkpoint_is_refused_and_its_results_kept(tmp_path):
  deep, mlp = str(tmp_path / 'deep'), str(tmp_path / 'mlp')
  assert _Run('--model=synthetic.DeepMlpGPipe', '--logdir=' + deep, '--max_steps=2').returncode == 0
  assert _Run('--model=synthetic.Mlp', '--logdir=' + mlp, '--max_steps=2').returncode == 0
  assert _Run('--model=synthetic.Mlp', '--logdir=' + mlp, '--mode=eval').returncode == 0
  metrics = os.path.join(mlp, 'eval_test', 'metrics.json')
  before = open(metrics).read()
  line = _OneLineError(_Run('--model=synthetic.Mlp', '--logdir=' + mlp, '--mode=eval',
                            '--checkpoint_path=%s/train/ckpt-2' % deep))
  assert line.startswith('Checkpoint %s/train/ckpt-2 does not match this model: 12 variable(s) in the checkpoint but '
                         'not in this model (task/network/sub/2/b, ' % deep), line
  assert open(metrics).read() == before


def test_the_corrupt_checkpoint_advice_works_as_written(tmp_path):
  logdir = str(tmp_path / 'run')
  train_dir = os.path.join(logdir, 'train')
  assert _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=400', SAVE_EVERY_100).returncode == 0
  data = os.path.join(train_dir, 'ckpt-400.data-00000-of-00001')
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 3)
  line = _OneLineError(_Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval'))
  assert 'ckpt-400 (files: ckpt-400.data-00000-of-00001, ckpt-400.index) is corrupt or truncated' in line
  advised = re.search(r'pass (--checkpoint_path=\S+) to use it', line).group(1)
  assert advised == '--checkpoint_path=%s/ckpt-300' % train_dir
  followed = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval', advised)
  assert followed.returncode == 0 and 'at step 300' in followed.stdout, followed.stderr
  # Training falls back by itself, says so, and keeps the damaged files.
  resumed = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=500', SAVE_EVERY_100)
  assert resumed.returncode == 0, resumed.stderr
  assert 'Moved its files to %s/corrupt.' % train_dir in resumed.stdout
  assert 'Resumed from %s/ckpt-300 at step 300.' % train_dir in resumed.stdout
  assert sorted(os.listdir(os.path.join(train_dir, 'corrupt'))) == ['ckpt-400.data-00000-of-00001', 'ckpt-400.index']
  assert _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval').returncode == 0


def _Children(pid):
  """Pids whose parent is `pid`."""
  children = []
  for entry in os.listdir('/proc'):
    if entry.isdigit():
      try:
        with open('/proc/%s/stat' % entry) as f:
          fields = f.read().rsplit(')', 1)[1].split()
      except OSError:
        continue
      if int(fields[1]) == pid:
        children.append(int(entry))
  return children


def _Alive(pid):
  try:
    with open('/proc/%d/stat' % pid) as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'  # A zombie has exited.
  except OSError:
    return False


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='parent-death signals are Linux only')
@pytest.mark.parametrize('sig', [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_launcher_stops_its_trainer_and_workers(tmp_path, sig):
  logdir = str(tmp_path / 'run')
  launcher = subprocess.Popen([sys.executable, os.path.join(ROOT, 'tools', 'launch_local.py'), '--workers=2',
                               '--log_dir=%s' % (tmp_path / 'logs'), '--', '--model=synthetic.DeepMlpGPipe',
                               '--logdir=' + logdir, '--max_steps=10000000', SAVE_EVERY_100],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    assert _WaitFor(lambda: os.path.exists(os.path.join(logdir, 'train', 'checkpoint')), 180), launcher.stderr
    children = _Children(launcher.pid)
    assert len(children) == 3  # Two workers and the trainer.
    launcher.send_signal(sig)
    assert launcher.wait(60) == (-sig if sig == signal.SIGKILL else 128 + sig)
    assert _WaitFor(lambda: not any(_Alive(c) for c in children), 60), [c for c in children if _Alive(c)]
    # The trainer saved where it stopped and said so, killed launcher or not: its workers served its last save
    # (a parent-death SIGUSR1), and its stderr was the launcher's own, not the launcher's filter pipe.
    stderr = launcher.stderr.read()
    said = re.search(r'lingpipe-train: terminated \(SIGTERM\)[^\n]*?(/\S+/train/ckpt-\d+)', stderr)
    assert said and os.path.exists(said.group(1) + '.index'), stderr
  finally:
    if launcher.poll() is None:
      launcher.kill()


def test_a_launcher_that_ends_normally_leaves_nothing_and_says_nothing_of_its_workers(tmp_path):
  """Its workers, stopped while they re-executed themselves after the trainer released them, read as failed
  (-15, their logs kept) and left their restart markers in the temp folder."""
  scratch = tmp_path / 'tmp'
  scratch.mkdir()
  done = subprocess.run([sys.executable, os.path.join(ROOT, 'tools', 'launch_local.py'), '--workers=2', '--',
                         '--model=synthetic.DeepMlpGPipe', '--logdir=%s' % (tmp_path / 'run'), '--max_steps=20'],
                        capture_output=True, text=True, timeout=300, env=dict(os.environ, TMPDIR=str(scratch)))
  assert done.returncode == 0 and 'Saved checkpoint' in done.stdout, done.stderr
  assert 'exited with' not in done.stderr, done.stderr
  assert os.listdir(scratch) == []


_DISK_FULL = '''
set -u
mount -t tmpfs -o size=8m tmpfs "$1"
run() { %s --model=synthetic.Mlp --logdir="$1/run" --max_steps=100 \
    --model_params_override="task.train.save_interval_steps=20;task.train.log_interval_steps=100000;\
task.train.checkpoints_to_keep=100"; echo "rc=$?"; }
run "$1"
echo "listing:" $(ls "$1/run/train") ":end"
echo "ckpt-40 bytes:" $(cat "$1"/run/train/ckpt-40.* | wc -c) ":end"
mount -o remount,size=64m "$1"
run "$1"
''' % ' '.join(TRAINER)


def _InMountNamespace(script, folder):
  """Runs shell `script` with `folder` (made here) as $1 in a mount namespace of our own, where it may mount a
  small tmpfs; skips the test where the kernel or the sandbox allows none."""
  if not shutil.which('unshare') or subprocess.run(['unshare', '-rm', 'true'], capture_output=True).returncode:
    pytest.skip('no mount namespace here (unshare -rm)')
  folder.mkdir()
  return subprocess.run(['unshare', '-rm', 'sh', '-c', script, 'sh', str(folder)], capture_output=True, text=True,
                        timeout=300)


def test_a_full_disk_is_one_line_with_the_space_needed_and_a_rerun_resumes(tmp_path):
  """On a real 8 MiB tmpfs (each checkpoint of synthetic.Mlp is ~3 MiB with its input state), in a mount namespace
  of our own; skipped where the kernel or the sandbox allows none."""
  mount_point = tmp_path / 'tiny'
  result = _InMountNamespace(_DISK_FULL, mount_point)
  train_dir = '%s/run/train' % mount_point
  first, second = result.stdout.split('rc=')[1:3]
  assert first.startswith('1\n'), result.stdout + result.stderr
  error = [line for line in result.stderr.splitlines() if line.startswith('lingpipe-train: error:')]
  assert len(error) == 1, result.stderr
  # The space needed is the last checkpoint's size, which varies with the input's state (how many batches the
  # prefetch held when it was saved): 3.0 or 3.1 MiB.
  needed = int(result.stdout.split('ckpt-40 bytes:')[1].split(':end')[0]) / 2.0**20
  assert re.match(r'lingpipe-train: error: No space left on device writing checkpoint %s/ckpt-60 \([\d.]+ MiB free '
                  r'on its filesystem; it needs about %s MiB: free at least [\d.]+ MiB\)\. Nothing was lost and the '
                  r'partial files were removed\. Free space and rerun the same command: it resumes from %s/ckpt-40 '
                  r'\(step 40\)\.$' % (train_dir, re.escape('%.1f' % needed), train_dir), error[0]), error[0]
  listing = result.stdout.split('listing:')[1].split(':end')[0].split()
  assert listing == ['checkpoint', 'ckpt-20.data-00000-of-00001', 'ckpt-20.index', 'ckpt-40.data-00000-of-00001',
                     'ckpt-40.index'] + [f for f in listing if f.startswith('events.')], listing  # No litter.
  assert second.startswith('0\n') and 'Resumed from %s/ckpt-40 at step 40.' % train_dir in result.stdout


_NO_BYTE_FREE = '''
set -u
mount -t tmpfs -o size=4m tmpfs "$1"
dd if=/dev/zero of="$1/filler" bs=1M count=16 2>/dev/null
%s --model=synthetic.Mlp --logdir="$1/run" --max_steps=10; echo "rc=$?"
echo "left:" $(ls -A "$1/run/train") ":end"
''' % ' '.join(TRAINER)


def test_a_disk_with_no_byte_free_is_one_line_from_the_summaries_too(tmp_path):
  """The events writer fails before any checkpoint (it raised a 40-line ResourceExhaustedError)."""
  mount_point = tmp_path / 'full'
  result = _InMountNamespace(_NO_BYTE_FREE, mount_point)
  assert 'rc=1' in result.stdout, result.stdout + result.stderr
  lines = result.stderr.strip().splitlines()
  assert lines == ['lingpipe-train: error: No space left on device writing the training summaries in %s/run/train '
                   '(0 B free on its filesystem). Nothing was lost; free space and rerun: no checkpoint was written '
                   'yet: the same command starts from step 0.' % mount_point], result.stderr
  assert 'left: :end' in result.stdout, result.stdout  # No empty events file.


def test_balance_memory_works_in_a_fresh_trainer_with_no_tf_variables(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith('TF_')}
  env['TF_ENABLE_ONEDNN_OPTS'] = '0'  # As on CPUs where oneDNN is off by default: no allocator statistics unasked.
  assert memory_stats.ENV_VAR not in env
  result = _Run('--model=synthetic.DeepMlpGPipe', '--logdir=%s' % (tmp_path / 'run'), '--max_steps=2',
                "--model_params_override=task.network.balance='memory'", env=env)
  assert result.returncode == 0, result.stderr
  assert 'step 2/2' in result.stdout


def _SignalWhen(args, sig, ready):
  """Starts lingpipe-train with `args` (SIGINT at its default, as in a terminal) and sends it `sig` once
  ready(process) holds; returns (exit status, stderr)."""
  process = subprocess.Popen(TRAINER + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  try:
    assert ready(process)
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
  finally:
    if process.poll() is None:
      process.kill()
  return process.returncode, err


def _PrintsALineStartingWith(prefix):
  def Ready(process):
    while not process.stdout.readline().startswith(prefix):
      assert process.poll() is None, process.stderr.read()
    return True
  return Ready


def test_ctrl_c_is_one_line_and_the_same_command_resumes(tmp_path):
  logdir = str(tmp_path / 'run')
  code, err = _SignalWhen(['--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=10000000', SAVE_EVERY_100],
                          signal.SIGINT, lambda _: _WaitFor(lambda: os.path.exists(os.path.join(logdir, 'train',
                                                                                                  'checkpoint'))))
  assert code == 130
  m = re.match(r'lingpipe-train: interrupted; the same command resumes from (\S+/ckpt-(\d+)) \(step \2\)\.\n$', err)
  assert m and m.group(1).startswith(os.path.join(logdir, 'train', 'ckpt-')), err
  resumed = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=1', SAVE_EVERY_100)
  assert resumed.returncode == 0 and 'Resumed from %s at step %s.' % m.groups() in resumed.stdout, resumed.stderr


def test_ctrl_c_before_the_first_checkpoint_says_the_run_starts_over(tmp_path):
  code, err = _SignalWhen(['--model=synthetic.Mlp', '--logdir=%s' % (tmp_path / 'run'), '--max_steps=10000000',
                           '--model_params_override=task.train.save_interval_steps=100000000'], signal.SIGINT,
                          _PrintsALineStartingWith('Training synthetic.Mlp from step 0'))
  assert code == 130
  assert err == ('lingpipe-train: interrupted; no checkpoint was written yet: the same command starts from step '
                 '0.\n'), err


def test_sigterm_finishes_the_step_saves_and_the_same_command_resumes(tmp_path):
  logdir = str(tmp_path / 'run')
  command = ['--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=100000000',
             '--model_params_override=task.train.save_interval_steps=100000000;task.train.log_interval_steps=20']
  code, err = _SignalWhen(command, signal.SIGTERM, _PrintsALineStartingWith('step 20/'))  # Steps not yet saved.
  assert code == 143
  m = re.match(r'lingpipe-train: terminated \(SIGTERM\) at step (\d+): saved (\S+/ckpt-\1); the same command '
               r'resumes from it\.\n$', err)
  assert m and int(m.group(1)) >= 20, err
  # A save killed midway (SIGKILL after the grace period, or a crash) leaves TensorFlow's ckpt-N_temp/: the next
  # run removes it.
  killed_save = os.path.join(logdir, 'train', 'ckpt-%d_temp' % (int(m.group(1)) + 1))
  os.makedirs(killed_save)
  open(os.path.join(killed_save, 'part-00000-of-00001.data-00000-of-00001'), 'w').close()
  # A kill at the rename of the `checkpoint` index leaves TensorFlow's checkpoint.tmp<uuid hex> (it used to stay
  # for good); files of the user's with similar names stay.
  killed_index = os.path.join(logdir, 'train', 'checkpoint.tmp' + '0123456789abcdef' * 2)
  open(killed_index, 'w').close()
  users = [os.path.join(logdir, 'train', name) for name in ('checkpoint.tmp.notes', 'ckpt-99_temp.txt', 'ckpt-1.txt')]
  for path in users:
    open(path, 'w').close()
  resumed = _Run(*command[:-2], '--max_steps=1')
  assert 'Resumed from %s at step %s.' % (m.group(2), m.group(1)) in resumed.stdout, resumed.stderr
  assert 'Removed the temporary files of a save that was stopped: %s, %s.' % (
      killed_index, killed_save) in resumed.stdout, resumed.stdout
  assert not os.path.exists(killed_save) and not os.path.exists(killed_index)
  assert all(os.path.exists(path) for path in users)


def test_init_from_a_pipelined_run_into_a_plain_model_needs_no_flag(tmp_path):
  pipelined, plain = str(tmp_path / 'k2'), str(tmp_path / 'k1')
  assert _Run('--model=synthetic.DeepMlpGPipe', '--logdir=' + pipelined, '--max_steps=1').returncode == 0
  result = _Run('--model=synthetic.DeepMlpGPipe', '--logdir=' + plain, '--max_steps=1',
                '--model_params_override=task.network.num_splits=1;task.train.init_from_checkpoint=%s/train/ckpt-1'
                % pipelined)
  assert result.returncode == 0, result.stderr
  assert 'Initialized 18 variables' in result.stdout and 'from %s/train/ckpt-1' % pipelined in result.stdout


_READ_ONLY = '''
set -u
mount --bind -o ro "$1" "$1"
for mode in train eval export; do
  %s --model=synthetic.Mlp --logdir="$1/run" --mode=$mode --max_steps=4; echo "rc=$?"
done
''' % ' '.join(TRAINER)


def test_a_read_only_logdir_is_one_line_in_train_eval_and_export_and_eval_prints_its_metrics_first(tmp_path):
  """On a real read-only bind mount, in a mount namespace of our own (skipped where there is none)."""
  if not shutil.which('unshare') or subprocess.run(['unshare', '-rm', 'true'], capture_output=True).returncode:
    pytest.skip('no mount namespace here (unshare -rm)')
  logdir = str(tmp_path / 'run')
  assert _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=2').returncode == 0
  result = subprocess.run(['unshare', '-rm', 'sh', '-c', _READ_ONLY, 'sh', str(tmp_path)], capture_output=True,
                          text=True, timeout=600)
  assert result.stdout.count('rc=1') == 3, result.stdout + result.stderr
  errors = result.stderr.strip().splitlines()
  assert errors == [
      'lingpipe-train: error: Cannot train in --logdir %s: Read-only file system (%s/LOCK); nothing was changed. '
      'Training needs a folder it can write.' % (logdir, logdir),
      'lingpipe-train: error: Cannot write metrics %s/eval_test/metrics-2.json: Read-only file system '
      '(%s/eval_test).' % (logdir, logdir),
      'lingpipe-train: error: Cannot write SavedModel %s/export/2: Read-only file system (%s/export).' % (
          logdir, logdir)], result.stderr
  assert 'Eval of synthetic.Mlp at step 2 on Test' in result.stdout
