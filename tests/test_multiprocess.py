"""Pipelines across processes: lingpipe-worker processes on loopback, the trainer connecting to them.

Every trainer here runs in a subprocess (connecting to a cluster changes the process's TensorFlow context). The
reference runs are local, in this process, on the logical CPU devices of conftest.py.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.distributed import cluster
from lingpipe.distributed import watchdog as watchdog_lib
from lingpipe.model import model_registry
from lingpipe.distributed import local_cluster
from lingpipe.runners import train_loop

MODEL = 'synthetic.DeepMlpGPipe'
STEPS_OVERRIDE = 'task.train.save_interval_steps=1;task.train.log_interval_steps=1'


@pytest.fixture(scope='module')
def workers():
  """Two workers with two CPU devices each: four devices in two processes."""
  with local_cluster.LocalCluster(2, cpu_devices=2) as w:
    yield w


def _Trainer(spec_text, logdir, *flags, timeout=180):
  command = [sys.executable, '-m', 'lingpipe.trainer', '--cluster_spec=' + spec_text, '--model=' + MODEL,
             '--logdir=%s' % logdir] + list(flags)
  return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def _LocalRun(logdir, steps, override=STEPS_OVERRIDE):
  p = model_registry.GetParams(MODEL, 'Train')
  p.FromText(override)
  p.task.train.max_steps = steps
  with cluster.Use(cluster.Cluster.FromParams(p.cluster, cluster.MaxNumSplits(p))):
    train_loop.TrainLoop(p, str(logdir), out=open(os.devnull, 'w')).Run()


def _Variables(logdir, step):
  reader = tf.train.load_checkpoint(os.path.join(str(logdir), 'train', 'ckpt-%d' % step))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith('task/') and 'OPTIMIZER_SLOT' not in name}


def _AssertSameVariables(a, b, atol):
  assert sorted(a) == sorted(b) and len(a) > 8
  for name in a:
    np.testing.assert_allclose(a[name], b[name], rtol=0, atol=atol, err_msg=name)


@pytest.mark.slow
def test_training_across_processes_equals_the_local_run(workers, tmp_path):
  _LocalRun(tmp_path / 'local', 3)
  local = [_Variables(tmp_path / 'local', s) for s in (1, 3)]
  # R=1 x K=2 with one device of each worker: split 0 in one process, split 1 in the other.
  out = _Trainer(workers.spec_text, tmp_path / 'k2', '--max_steps=3',
                 '--model_params_override=%s;cluster.devices_per_task=1' % STEPS_OVERRIDE)
  assert out.returncode == 0, out.stderr[-2000:]
  for s, expected in zip((1, 3), local):  # Step 1 shows the gradients; step 3, training. Measured: identical.
    _AssertSameVariables(expected, _Variables(tmp_path / 'k2', s), atol=1e-7)
  # Each worker wrote its own variables' shard (the trainer, the step and the input position).
  assert sorted(f for f in os.listdir(tmp_path / 'k2' / 'train') if f.startswith('ckpt-3.data-')) == [
      'ckpt-3.data-0000%d-of-00003' % i for i in range(3)]
  # R=2 x K=2 on the global batch: replica 0 on worker 0's two devices, replica 1 on worker 1's.
  out = _Trainer(workers.spec_text, tmp_path / 'r2k2', '--max_steps=3', '--mode=train',
                 '--model_params_override=%s;cluster.num_replicas=2' % STEPS_OVERRIDE)
  assert out.returncode == 0, out.stderr[-2000:]
  # Replicas sum their gradients in another order than one replica does; Adam's first step is about
  # lr * g / (|g| + eps), so that rounding shows as up to ~1e-3 of lr (3e-3) in weights with near-zero gradients
  # (measured 3.1e-6, the same as R=2 on local devices; test_data_parallel.py compares the gradients themselves).
  for s, expected in zip((1, 3), local):
    _AssertSameVariables(expected, _Variables(tmp_path / 'r2k2', s), atol=1e-5)
  inspect = _Trainer(workers.spec_text, tmp_path / 'r2k2', '--mode=inspect',
                     '--model_params_override=cluster.num_replicas=2')
  assert inspect.returncode == 0, inspect.stderr[-2000:]
  assert ('replica 1: split 0 -> /job:worker/replica:0/task:1/device:CPU:0  '
          'split 1 -> /job:worker/replica:0/task:1/device:CPU:1') in inspect.stdout


@pytest.mark.slow
def test_workers_of_another_cluster_and_missing_workers_are_refused(workers, tmp_path):
  addresses = workers.spec['worker']
  swapped = _Trainer(json.dumps({'worker': addresses[::-1]}), tmp_path / 'a', '--max_steps=1')
  assert swapped.returncode == 1
  assert ('Worker /job:worker/replica:0/task:0 at %s was started for another cluster: it is /job:worker/task:1 of'
          % addresses[1]) in swapped.stderr
  missing = 'worker=%s,%s,127.0.0.1:%d' % (addresses[0], addresses[1], local_cluster.FreePorts(1)[0])
  start = time.time()
  unreachable = _Trainer(missing, tmp_path / 'b', '--max_steps=1')
  assert unreachable.returncode == 1 and time.time() - start < 60
  assert 'Worker /job:worker/replica:0/task:2 at 127.0.0.1:' in unreachable.stderr
  assert 'is unreachable (Connection refused). Start it with: lingpipe-worker' in unreachable.stderr
  assert swapped.stderr.count('\n') == 1 and unreachable.stderr.count('\n') == 1, swapped.stderr + unreachable.stderr
  assert not os.path.exists(tmp_path / 'b' / 'train')  # Nothing was written.


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('unshare'), reason='needs root and unshare for a mount '
                    'namespace')
@pytest.mark.slow
def test_a_worker_that_does_not_see_the_logdir_is_refused_before_step_0(tmp_path):
  hidden = tmp_path / 'shared'
  hidden.mkdir()
  spec = json.dumps({'worker': ['127.0.0.1:%d' % local_cluster.FreePorts(1)[0]]})
  # The worker runs in its own mount namespace with an empty file system over the folder: another host's view.
  worker = subprocess.Popen(['unshare', '-m', 'sh', '-c', 'mount -t tmpfs none %s && exec "$@"' % hidden, 'sh'] +
                            local_cluster.WorkerArgs(spec, 'worker', 0, cpu_devices=2),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    assert 'ready at' in worker.stdout.readline() + worker.stdout.readline()
    out = _Trainer(spec, hidden / 'run', '--max_steps=1')
  finally:
    worker.kill()
    worker.wait()
  assert out.returncode == 1, out.stderr[-2000:]
  assert out.stderr.startswith(
      'lingpipe-train: error: Worker /job:worker/replica:0/task:0 at %s cannot use the logdir %s (' % (
          json.loads(spec)['worker'][0], hidden / 'run' / 'train')), out.stderr
  assert 'must be one path every task sees: a shared or network file system' in out.stderr
  assert out.stderr.count('\n') == 1 and not os.path.exists(hidden / 'run' / 'params.txt')
  assert os.listdir(hidden / 'run' / 'train') == []  # The check left nothing behind.


def _WaitFor(path, text, process, timeout_s=120):
  deadline = time.time() + timeout_s
  while time.time() < deadline:
    if text in open(path).read():
      return
    assert process.poll() is None, open(path).read()[-2000:]
    time.sleep(0.2)
  raise AssertionError('%r did not appear in %s' % (text, path))


@pytest.mark.slow
@pytest.mark.parametrize('fault', ['killed', 'hung'])
def test_a_worker_that_dies_or_hangs_stops_the_trainer_with_its_name_and_a_rerun_resumes(fault, tmp_path):
  with local_cluster.LocalCluster(2) as w:
    log_path = tmp_path / 'trainer.log'
    with open(log_path, 'w') as log:
      trainer = subprocess.Popen(
          [sys.executable, '-m', 'lingpipe.trainer', '--cluster_spec=' + w.spec_text, '--model=' + MODEL,
           '--logdir=%s' % (tmp_path / 'run'), '--max_steps=1000000',
           '--model_params_override=task.train.save_interval_steps=20;cluster.timeout_s=4'],
          stdout=log, stderr=subprocess.STDOUT)
    try:
      _WaitFor(log_path, 'ckpt-40', trainer)
      start = time.time()
      w.processes[1].send_signal(signal.SIGKILL if fault == 'killed' else signal.SIGSTOP)
      code = trainer.wait(60)
      elapsed = time.time() - start
    finally:
      trainer.kill()
    text = open(log_path).read()
    assert code == 1, text[-2000:]
    # A dead worker fails the step at once; a frozen one is named within cluster.timeout_s (4 s; it took 2x before,
    # and at least 8 s), plus the trainer's exit on a loaded machine.
    assert elapsed < (10 if fault == 'killed' else 7), (elapsed, text[-1000:])
    assert 'worker /job:worker/replica:0/task:1 at %s' % w.spec['worker'][1] in text, text[-2000:]
    if fault == 'hung':
      pid = w.processes[1].pid
      assert ('unresponsive: its process (pid %d on this host) is stopped (SIGSTOP, Ctrl-Z or a debugger); '
              '`kill -CONT %d` lets it go on' % (pid, pid)) in text, text[-2000:]
    assert 'then rerun the same command to resume from' in text
    # No TensorFlow or gRPC log lines (native_log.py), and the error is the last line the user sees.
    lines = text.strip().splitlines()
    assert not [line for line in lines if re.match(r'^[IWEF]\d{4} ', line)], text[-3000:]
    assert lines[-1].startswith('lingpipe-train: error: '), text[-3000:]
    if fault == 'hung':  # Stopping a frozen worker does not wait for it to be continued (it waited 10 s).
      start = time.time()
      assert w.StopWorker(1) == 0 and time.time() - start < 5
    w.StartWorker(1)
    last = int(text.split('to resume from ')[1].split('ckpt-')[1].split('.')[0])
    out = _Trainer(w.spec_text, tmp_path / 'run', '--max_steps=%d' % (last + 5))
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'Resumed from %s at step %d.' % (tmp_path / 'run' / 'train' / ('ckpt-%d' % last), last) in out.stdout
    assert 'ckpt-%d' % (last + 5) in out.stdout


@pytest.mark.slow
def test_worker_exits_cleanly_on_sigterm_and_rejects_bad_flags(tmp_path):
  w = local_cluster.LocalCluster(1)
  process = w.StartWorker(0)
  assert w.StopWorker(0, signal.SIGTERM) == 0
  assert 'stopping' in w.Log(0)
  assert w.Stop() == [0] and not os.path.exists(w.log_dir)  # A clean stop leaves no temporary logs behind.
  bad = subprocess.run(local_cluster.WorkerArgs(w.spec_text, 'worker', 3), capture_output=True, text=True,
                       timeout=120)
  assert bad.returncode == 1
  assert "lingpipe-worker: error: Task 3 does not exist: job 'worker' has 1 task(s)" in bad.stderr
  del process


@pytest.mark.slow
def test_a_worker_that_died_keeps_its_log_directory(capsys):
  w = local_cluster.LocalCluster(1)
  w.StartWorker(0).kill()
  w.processes[0].wait()
  assert w.Stop() == [-signal.SIGKILL]
  assert os.path.exists(w.LogPath(0))
  kept = 'worker(s) 0 exited with %d; their logs are kept in %s' % (-signal.SIGKILL, w.log_dir)
  assert kept in capsys.readouterr().err
  shutil.rmtree(w.log_dir)


@pytest.mark.slow
def test_a_connecting_process_asks_for_two_inter_op_threads_and_warns_once_too_late():
  # The workers run a connected process's steps with its inter-op setting; pinned to one core, TensorFlow's default
  # would be one thread (remote.RequestInterOpThreads). A fresh process: the setting is fixed once TF has started.
  code = '\n'.join([
      'import tensorflow as tf',
      'from lingpipe.distributed import remote',
      'print(remote.RequestInterOpThreads(2), tf.config.threading.get_inter_op_parallelism_threads())',
      'tf.constant(1.0) + 1',
      'print(remote.RequestInterOpThreads(2), remote.RequestInterOpThreads(3))'])
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
  assert out.returncode == 0, out.stderr
  assert out.stdout.split('\n')[-3:] == ['2 2', '2 None', '']
  assert ('TensorFlow started in this process before it connected, with 2 inter-op threads, and the workers will '
          'run its steps with as many; with fewer than 3') in out.stderr


@pytest.mark.slow
def test_tf_config_alone_trains_across_processes_and_resumes_after_a_worker_is_killed(tmp_path):
  """The Kubernetes-style set-up: each worker and the trainer (the chief) get only TF_CONFIG."""
  with local_cluster.LocalCluster(2, cpu_devices=1, tf_config=True) as tf_workers:
    env = dict(os.environ, TF_CONFIG=tf_workers.TfConfig('chief', 0))
    command = [sys.executable, '-m', 'lingpipe.trainer', '--model=' + MODEL, '--logdir=%s' % (tmp_path / 'tf'),
               '--model_params_override=%s;cluster.devices_per_task=1' % STEPS_OVERRIDE]
    first = subprocess.run(command + ['--max_steps=2'], capture_output=True, text=True, timeout=180, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    tf_workers.StopWorker(1, signal.SIGKILL)
    tf_workers.StartWorker(1)
    resumed = subprocess.run(command + ['--max_steps=3'], capture_output=True, text=True, timeout=180, env=env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert 'step 3/3' in resumed.stdout and 'ckpt-2' in resumed.stdout + resumed.stderr


class _FrozenWorkerMesh:
  """A cluster whose worker 1 never answers: each probe takes the whole time it is given."""

  def __init__(self):
    self.probes = []

  def Diagnose(self, timeout_s):
    self.probes.append(timeout_s)
    time.sleep(timeout_s)
    return [(1, '127.0.0.1:1', 'no answer to a TensorFlow op within %g s' % timeout_s)]

  def FailureMessage(self, problems, what, resume_hint):
    return '%s: %s%s' % (what, problems[0][2], resume_hint)


@pytest.mark.slow
def test_the_watchdog_names_a_frozen_worker_within_the_timeout(monkeypatch, capsys):
  exited = []
  monkeypatch.setattr(os, '_exit', lambda code: exited.append((code, time.time())))
  mesh = _FrozenWorkerMesh()
  watchdog = watchdog_lib.Watchdog(mesh, 6.0, lambda: None)
  start = time.time()
  with watchdog:
    while not exited and time.time() - start < 20:
      time.sleep(0.05)
  assert exited and exited[0][0] == 1
  assert 5.0 <= exited[0][1] - start <= 6.6, exited[0][1] - start  # Before: 6 s, then a 6 s probe.
  err = capsys.readouterr().err
  assert err.startswith('lingpipe-train: error: No training progress for 6 s (cluster.timeout_s=6): '), err


@pytest.mark.slow
def test_pipeline_auto_chooses_among_the_workers_trains_and_a_resume_reuses_it(tmp_path):
  """--pipeline=auto with --cluster_spec: the layers timed on a worker, the best candidates stepped across the
  workers, the choice recorded; the resume reuses it without timing."""
  with local_cluster.LocalCluster(2) as w:
    first = _Trainer(w.spec_text, tmp_path / 'run', '--pipeline=auto', '--max_steps=2', timeout=400)
    assert first.returncode == 0, first.stderr[-3000:]
    assert 'Pipeline task.network chosen' in first.stdout and 'stepped s' in first.stdout, first.stdout[-3000:]
    assert re.search(r'a hand-off [\d.]+ ms \+ [\d.]+ ms a MiB', first.stdout), first.stdout[-3000:]
    recorded = open(tmp_path / 'run' / 'params.txt').read()
    assert 'machine=workers /job:worker/replica:0/task:0/device:CPU:0' in recorded
    resumed = _Trainer(w.spec_text, tmp_path / 'run', '--pipeline=auto', '--max_steps=3', timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the run's recorded configuration" in resumed.stdout and 'It was chosen on' not in resumed.stdout
  num_splits = int(re.search(r'task\.network\.num_splits : (\d+)', recorded).group(1))
  with local_cluster.LocalCluster(1) as w:  # A different worker set: one line, or a note where K still fits.
    other = _Trainer(w.spec_text, tmp_path / 'run', '--pipeline=auto', '--max_steps=4', timeout=300)
  if num_splits > 1:
    assert other.returncode == 1 and other.stderr.strip().splitlines()[-1].startswith(
        "lingpipe-train: error: Pipeline task.network: the run's recorded configuration has K=%d cells, chosen on 2 "
        'worker(s); this cluster has 1 worker(s) per replica.' % num_splits), other.stderr[-3000:]
  else:
    assert other.returncode == 0 and 'It was chosen on 2 worker(s); this is 1 worker(s).' in other.stdout
