"""A worker serves one trainer at a time and forgets a trainer that is gone (worker_lease.py)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from lingpipe.distributed import remote
from lingpipe.distributed import worker_lease
from lingpipe.memory import worker_memory
from lingpipe.distributed import local_cluster

MODEL = 'synthetic.DenseStack'
WIDE = 'task.hidden_dim=2048;task.num_layers=8;task.train.save_interval_steps=10'


def _Anon(pid):
  with open('/proc/%d/status' % pid) as f:
    return int([l for l in f if l.startswith('RssAnon')][0].split()[1]) * 1024


def _StartTrainer(w, logdir, log_path, *flags):
  log = open(log_path, 'w')
  return subprocess.Popen(
      [sys.executable, '-m', 'lingpipe.trainer', '--cluster_spec=' + w.spec_text, '--model=' + MODEL,
       '--logdir=%s' % logdir, '--max_steps=100000', '--model_params_override=' + WIDE] + list(flags),
      stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED='1'))


def _WaitFor(predicate, what, timeout_s=120):
  deadline = time.time() + timeout_s
  while time.time() < deadline:
    if predicate():
      return
    time.sleep(0.2)
  raise AssertionError('no %s within %d s' % (what, timeout_s))


@pytest.mark.slow
def test_a_killed_trainer_leaves_nothing_in_its_workers_and_a_live_one_is_not_shared(tmp_path):
  with local_cluster.LocalCluster(2) as w:
    pids = [p.pid for p in w.processes]
    fresh = [_Anon(pid) for pid in pids]
    trainer = _StartTrainer(w, tmp_path / 'run', tmp_path / 'a.log')
    try:
      _WaitFor(lambda: os.path.exists(tmp_path / 'run' / 'train' / 'ckpt-10.index'), 'checkpoint')
      trained = [_Anon(pid) for pid in pids]
      # A second trainer on the same workers is refused in one line while the first runs, and writes nothing.
      other = subprocess.run(
          [sys.executable, '-m', 'lingpipe.trainer', '--cluster_spec=' + w.spec_text, '--model=' + MODEL,
           '--logdir=%s' % (tmp_path / 'other'), '--max_steps=5'], capture_output=True, text=True, timeout=120)
      assert other.returncode == 1, other.stderr[-2000:]
      assert other.stderr.strip().splitlines()[-1].startswith(
          'lingpipe-train: error: Worker /job:worker/replica:0/task:0 at %s is in use by lingpipe-train pid %d' % (
              w.spec['worker'][0], trainer.pid)), other.stderr[-2000:]
      trainer.send_signal(signal.SIGKILL)
      trainer.wait()
    finally:
      trainer.kill()
    for task, pid in enumerate(pids):
      _WaitFor(lambda t=task: w.Log(t).count('ready at') == 2, 'restart of worker %d' % task)
      assert 'its trainer is gone (lingpipe-train pid %d' % trainer.pid in w.Log(task)
      assert w.processes[task].poll() is None and w.processes[task].pid == pid  # The same process, re-executed.
    released = [_Anon(pid) for pid in pids]
    for before, during, after in zip(fresh, trained, released):
      assert during > before + 100 * 2**20, (fresh, trained)  # The trainer's variables and slots were there.
      assert after < 1.1 * before, (fresh, trained, released)
    # The rerun resumes on the released workers, and holds what the first run held (within 10%).
    last = max(int(name[5:-6]) for name in os.listdir(tmp_path / 'run' / 'train') if name.endswith('.index'))
    rerun = _StartTrainer(w, tmp_path / 'run', tmp_path / 'b.log')
    try:
      _WaitFor(lambda: os.path.exists(tmp_path / 'run' / 'train' / ('ckpt-%d.index' % (last + 10))), 'checkpoint')
      again = [_Anon(pid) for pid in pids]
    finally:
      rerun.kill()
      rerun.wait()
    assert 'Resumed from' in open(tmp_path / 'b.log').read()
    for first, second in zip(trained, again):
      assert second < 1.1 * first, (trained, again)
    assert not os.path.exists(tmp_path / 'other')


class _Mesh:
  job = 'worker'

  def __init__(self, fresh, first, limit=2**30):
    self.identities = {0: {'fresh_anon': fresh}}
    self.at_connect = {0: {'anon': first, 'limit': limit}}


def test_a_memory_death_of_a_worker_that_began_holding_memory_blames_the_worker_not_the_configuration():
  assert worker_memory.HeldAtStart(_Mesh(300 * 2**20, 330 * 2**20), 0) is None
  held = worker_memory.HeldAtStart(_Mesh(300 * 2**20, 900 * 2**20), 0)
  assert held == ('worker task 0 began this run holding 600.00 MiB more than when it started (900.00 MiB, against '
                  '300.00 MiB fresh), memory an earlier trainer left there'), held
  mesh = remote.RemoteCluster([['/job:worker/replica:0/task:0/device:CPU:0']], {'worker': ['127.0.0.1:1']},
                              'worker', None, 5.0, _Mesh(300 * 2**20, 900 * 2**20).identities)
  mesh.at_connect = _Mesh(300 * 2**20, 900 * 2**20).at_connect
  mesh.memory_advice = 'The planner says this fits: num_micro_batches=8.'
  message = mesh.FailureMessage([(0, '127.0.0.1:1', 'it ran out of memory: killed')], 'Step failed', '')
  assert 'began this run holding 600.00 MiB more' in message and 'The planner says' not in message, message
  mesh.at_connect = _Mesh(300 * 2**20, 310 * 2**20).at_connect
  assert 'The planner says' in mesh.FailureMessage([(0, '127.0.0.1:1', 'it ran out of memory')], 'Step failed', '')


def test_a_lease_names_why_its_trainer_is_gone():
  assert worker_lease.HolderGone({'host': 'elsewhere', 'pid': 1}) is None
  assert worker_lease.HolderGone({'released': True}) == 'it released the worker'
  child = subprocess.Popen([sys.executable, '-c', 'pass'])
  child.wait()
  lease = {'host': os.uname().nodename, 'pid': child.pid}
  assert worker_lease.HolderGone(lease) == 'its process (pid %d on this host) has ended' % child.pid
  assert worker_lease.HolderGone(dict(lease, pid=os.getpid())) is None
  assert worker_lease.HolderGone(dict(lease, pid=os.getpid(), start='1')) is not None  # Another process's pid.
