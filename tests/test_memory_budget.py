"""Memory budgets under the kernel's memory cgroup: lingpipe-train and lingpipe-worker --memory_limit, a budget
inherited from the cgroup a process starts in, and a death by the budget named in one line by the trainer (and in
the worker's log), with every cgroup removed afterwards."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from lingpipe.core import byte_sizes
from lingpipe.core import errors
from lingpipe.memory import memory_cgroup
from lingpipe.distributed import local_cluster

TRAINER = [sys.executable, '-m', 'lingpipe.trainer']
_VERSION, _OWN = memory_cgroup.OwnCgroup()
needs_cgroup = pytest.mark.skipif(_OWN is None or not os.access(_OWN, os.W_OK),
                                  reason='needs a memory cgroup this user may make children in (root)')
# A dense stack that trains in one process in about 0.4 GiB, and one that does not fit 1 GiB in one process.
SMALL = 'task.num_layers=4;task.hidden_dim=512'
TOO_BIG = ('task.num_layers=14;task.hidden_dim=2048;task.network.num_splits=1;task.network.num_micro_batches=1;'
           'task.train.log_interval_steps=1')


def _RemoveCgroup(folder, wait_s=10):
  """Removes the test's cgroup `folder`, waiting for processes that are leaving it (rmdir is EBUSY until then);
  fails naming what is still in it."""
  deadline = time.time() + wait_s
  while True:
    try:
      os.rmdir(folder)
      return
    except OSError:
      if time.time() > deadline:
        with open(os.path.join(folder, 'cgroup.procs')) as f:
          left = f.read().split()
        pytest.fail('Cannot remove the test\'s cgroup %s: processes %s, cgroups %s still in it.' % (
            folder, left, [n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n))]))
      time.sleep(0.2)


@pytest.fixture
def own_cgroup():
  """Runs the test in a cgroup of its own (no limit), so that the processes it starts make theirs under it; yields
  a function listing those left (waiting up to 15 s for the guards of processes that just ended to remove them)."""
  folder = os.path.join(_OWN, 'lingpipe-test-%d' % os.getpid())
  os.mkdir(folder)
  with open(os.path.join(folder, 'cgroup.procs'), 'w') as f:
    f.write(str(os.getpid()))

  def Left():
    deadline = time.time() + 15
    while True:
      left = sorted(name for name in os.listdir(folder) if name.startswith(memory_cgroup.PREFIX))
      if not left or time.time() > deadline:
        return left
      time.sleep(0.2)

  try:
    yield Left
  finally:
    with open(os.path.join(_OWN, 'cgroup.procs'), 'w') as f:
      f.write(str(os.getpid()))
    Left()
    _RemoveCgroup(folder)


def test_sizes_parse_and_print_and_a_bad_one_is_one_line():
  assert byte_sizes.Parse('1.5GiB') == 3 * 2**29 and byte_sizes.Parse('800MiB') == 800 * 2**20
  assert byte_sizes.Parse('2e9') == 2 * 10**9 and byte_sizes.Format(3 * 2**29) == '1.50 GiB'
  for bad in ('lots', '-1GiB', '0', '1.5 GB of RAM'):
    with pytest.raises(errors.ConfigError, match=r"^Cannot read '.*' as --memory_limit; expected e\.g\. 16GiB"):
      byte_sizes.Parse(bad, '--memory_limit')
  done = subprocess.run(TRAINER + ['--model=synthetic.Mlp', '--mode=inspect', '--memory_limit=lots'],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 1 and done.stderr == (
      "lingpipe-train: error: Cannot read 'lots' as --memory_limit; expected e.g. 16GiB, 512MiB or 2e9 bytes.\n")


@needs_cgroup
def test_a_process_in_a_limited_cgroup_takes_its_limit_as_its_budget(tmp_path):
  folder = os.path.join(_OWN, 'lingpipe-test-%d' % os.getpid())
  os.mkdir(folder)
  try:
    with open(os.path.join(folder, memory_cgroup._LimitFile(_VERSION)), 'w') as f:  # pylint: disable=protected-access
      f.write(str(3 * 2**30))
    code = ('from lingpipe.memory import memory_budget as m; import json; '
            'print(json.dumps(m.Inherited()._asdict()))')
    done = subprocess.run(['sh', '-c', 'echo $$ > %s/cgroup.procs && exec "$@"' % folder, 'sh', sys.executable, '-c',
                           code], capture_output=True, text=True, timeout=60)
    budget = json.loads(done.stdout)
    assert budget['limit'] == 3 * 2**30 and budget['source'] == 'its cgroup %s' % folder, done.stderr
  finally:
    _RemoveCgroup(folder)


@needs_cgroup
@pytest.mark.slow
def test_a_trainer_that_outgrows_its_budget_is_one_line_and_leaves_no_cgroup(tmp_path, own_cgroup):
  done = subprocess.run(TRAINER + ['--model=synthetic.DenseStack', '--logdir=%s' % (tmp_path / 'run'),
                                   '--max_steps=3', '--memory_limit=1GiB', '--model_params_override=' + TOO_BIG],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 137, done.stderr[-2000:]
  # Then what the planner says fits, where this machine's processes were measured (memory/calibration.py).
  assert done.stderr.strip().splitlines()[-1].startswith(
      'lingpipe-train: error: killed by the kernel: it ran out of memory, its budget of 1.00 GiB (--memory_limit), '
      'peak 1.00 GiB. No checkpoint was written yet.'), done.stderr[-2000:]
  assert own_cgroup() == []
  # Under a budget it fits, the same model trains; the budget is said where a worker reports it.
  done = subprocess.run(TRAINER + ['--model=synthetic.DenseStack', '--logdir=%s' % (tmp_path / 'small'),
                                   '--max_steps=3', '--memory_limit=2GiB', '--model_params_override=' + SMALL],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]
  assert own_cgroup() == []
  # Only a death by the budget leaves a verdict file in the temp folder (every run left one, never removed).
  folder = os.path.dirname(memory_cgroup.VerdictPath(0))
  for name in os.listdir(folder) if os.path.isdir(folder) else []:
    verdict = memory_cgroup.Verdict(int(name.split('.')[0])) if name.split('.')[0].isdigit() else None
    assert verdict is None or verdict['oom_killed'], (name, verdict)


@pytest.mark.slow
def test_a_budget_above_the_machines_memory_is_refused_where_it_is_given(tmp_path):
  total = byte_sizes.MachineMemory()
  with pytest.raises(errors.ConfigError, match=r'^--memory_limit=1TiB is more than this machine has \(.* of memory\); '
                     r'give at most %dMiB' % (total // 2**20)):
    byte_sizes.ParseBudget('1TiB', '--memory_limit')
  assert byte_sizes.ParseBudget('1GiB', '--memory_limit') == 2**30
  with pytest.raises(errors.ConfigError, match=r'^--worker_memory=1TiB is more than this machine has'):
    local_cluster.LocalCluster(1, memory_limit='1TiB', log_dir=str(tmp_path))
  done = subprocess.run(TRAINER + ['--model=synthetic.Mlp', '--logdir=%s' % (tmp_path / 'run'),
                                   '--memory_limit=1TiB'], capture_output=True, text=True, timeout=300)
  assert done.returncode == 1 and done.stderr.startswith(
      'lingpipe-train: error: --memory_limit=1TiB is more than this machine has') and done.stderr.count('\n') == 1
  assert not os.path.exists(tmp_path / 'run')


@pytest.mark.slow
@needs_cgroup
def test_a_worker_killed_for_its_budget_while_starting_is_named_at_once(tmp_path, own_cgroup):
  start = time.time()
  with pytest.raises(errors.ClusterError, match=r'was killed by the kernel before it was ready: it ran out of its '
                     r'memory budget of 10\.00 MiB \(--worker_memory\) while starting\..* at least 512MiB'):
    local_cluster.LocalCluster(1, memory_limit='10MiB', log_dir=str(tmp_path)).Start()
  assert time.time() - start < 30
  assert own_cgroup() == []


@needs_cgroup
@pytest.mark.slow
@pytest.mark.parametrize('num_layers,what', [(28, 'Step 1'), (40, 'Building the model on the workers')])
def test_a_worker_that_outgrows_its_budget_is_named_by_the_trainer_and_in_its_log(tmp_path, own_cgroup, num_layers,
                                                                                  what):
  """Dense layers of width 2048 with Adam on two workers of 1 GiB: 28 run out in the first step, 40 already while
  the optimizer's slots are made."""
  with local_cluster.LocalCluster(2, memory_limit='1GiB', log_dir=str(tmp_path / 'logs')) as workers:
    for task in range(2):
      assert ('memory budget: 1.00 GiB (--memory_limit; enforced by the kernel\'s memory cgroup (v%d))' % _VERSION
              in workers.Log(task))
    done = subprocess.run(TRAINER + [
        '--cluster_spec=' + workers.spec_text, '--model=synthetic.DenseStack', '--logdir=%s' % (tmp_path / 'run'),
        '--max_steps=20', '--model_params_override=task.num_layers=%d;task.hidden_dim=2048;' % num_layers +
        'task.train.save_interval_steps=1000'], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith('lingpipe-train: error: %s failed (' % what), line
    m = re.search(r'worker /job:worker/replica:0/task:(\d) at 127\.0\.0\.1:\d+: it ran out of memory: the kernel '
                  r'killed it at its budget of 1\.00 GiB \(--memory_limit; peak 1\.00 GiB\)\. Restart it \(.* '
                  r'--memory_limit=1024MiB\), then rerun the same command \(no checkpoint was written yet\)\.', line)
    assert m, line
    assert ('killed by the kernel: it ran out of memory, its budget of 1.00 GiB (--memory_limit), peak 1.00 GiB.'
            in workers.Log(int(m.group(1))))
  assert own_cgroup() == []


@needs_cgroup
@pytest.mark.slow
def test_two_capped_workers_train_save_and_resume_a_model_the_capped_plain_process_cannot(tmp_path, own_cgroup):
  """GPipe's promise under real caps: 14 dense layers of width 2048 with Adam (55M parameters) do not train in one
  process of 1 GiB, and do on two workers of 1 GiB each, with the trainer under 1 GiB too (no weight passes through
  it), saving and resuming."""
  model = ['--model=synthetic.DenseStack', '--memory_limit=1GiB']
  depth = 'task.num_layers=14;task.hidden_dim=2048;task.train.log_interval_steps=1;'
  plain = subprocess.run(TRAINER + model + [
      '--logdir=%s' % (tmp_path / 'plain'), '--max_steps=3', '--model_params_override=' + depth +
      "task.network.num_splits=1;task.network.num_micro_batches=1;task.network.remat='never'"],
                         capture_output=True, text=True, timeout=300)
  assert plain.returncode == 137 and 'it ran out of memory, its budget of 1.00 GiB' in plain.stderr, plain.stderr
  with local_cluster.LocalCluster(2, memory_limit='1GiB', log_dir=str(tmp_path / 'logs')) as workers:
    run = TRAINER + model + ['--cluster_spec=' + workers.spec_text, '--logdir=%s' % (tmp_path / 'k2'),
                             '--model_params_override=' + depth + 'task.network.num_splits=2']
    first = subprocess.run(run + ['--max_steps=3'], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert 'Saved checkpoint %s' % (tmp_path / 'k2' / 'train' / 'ckpt-3') in first.stdout
    assert re.search(r'workers_peak=\[task 0 0\.\d\d/1\.00 GiB, task 1 0\.\d\d/1\.00 GiB\]', first.stdout), first.stdout
    resumed = subprocess.run(run + ['--max_steps=5'], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert 'Resumed from %s at step 3.' % (tmp_path / 'k2' / 'train' / 'ckpt-3') in resumed.stdout
    # A worker's peak is its charge without the page cache of the checkpoints it wrote: the rerun on the same
    # workers reads as the first run did (the cgroup's usage read 1.00/1.50 GiB after two runs, 0.50 fresh).
    peaks = [[float(x) for x in re.findall(r'task \d (\d\.\d\d)/', [
        line for line in run_out.stdout.splitlines() if 'workers_peak' in line][-1])] for run_out in (first, resumed)]
    assert all(abs(b - a) <= 0.1 * a for a, b in zip(*peaks)), peaks
  assert own_cgroup() == []


@needs_cgroup
@pytest.mark.slow  # The process model's calibration (two trials) and a choice: about 30 s.
def test_a_first_choice_under_a_budget_measures_the_machine_outside_the_budget(tmp_path, own_cgroup):
  """The calibration's trials started inside the trainer's budget, where their own was refused and their memory
  was never read: a KeyError traceback at 700 MiB, 1.5 GiB and 3 GiB."""
  env = dict(os.environ, LINGPIPE_CACHE=str(tmp_path / 'cache'), TMPDIR=str(tmp_path / 'tmp'))
  os.makedirs(tmp_path / 'tmp')
  done = subprocess.run(TRAINER + ['--model=synthetic.DeepMlpGPipe', '--logdir=%s' % (tmp_path / 'run'),
                                   '--pipeline=auto', '--memory_limit=1.5GiB', '--max_steps=2'],
                        capture_output=True, text=True, timeout=600, env=env)
  assert done.returncode == 0, done.stderr[-3000:]
  assert re.search(r'process memory: plain, 12 layers: planner \d+ MiB, measured \d+ MiB', done.stdout), done.stdout
  assert 'process peak MiB' in done.stdout, done.stdout
  assert json.load(open(tmp_path / 'cache' / 'process_memory.json'))
  assert os.listdir(tmp_path / 'tmp') == []  # The trials' logdirs, and nothing else.
  assert own_cgroup() == []


def test_a_cgroup_limit_above_the_machines_memory_is_said_and_the_machines_memory_is_the_budget(monkeypatch):
  """A container's limit set for a larger host (64 GiB on 23.5) was taken without a word, where --memory_limit=40GiB
  is refused."""
  from lingpipe.memory import memory_budget  # pylint: disable=g-import-not-at-top
  container = memory_cgroup.Budget(64 * 2**30, 'its cgroup /sys/fs/cgroup/memory/docker', "the kernel's memory "
                                   'cgroup (v1)', '/sys/fs/cgroup/memory/docker', 1)
  monkeypatch.setattr(memory_budget, 'Inherited', lambda: container)
  monkeypatch.setattr(byte_sizes, 'MachineMemory', lambda: 47 * 2**29)
  budget, note = memory_budget._InheritedWithinMachine('lingpipe-train')  # pylint: disable=protected-access
  assert budget.limit == 47 * 2**29 and budget.cgroup == container.cgroup and not budget.enforcement
  assert note == ("lingpipe-train: note: the limit of its cgroup /sys/fs/cgroup/memory/docker (64.00 GiB) is above "
                  "this machine's memory (23.50 GiB); the budget planned for is the machine's memory.")
  monkeypatch.setattr(memory_budget, 'Current', lambda: None)  # A library process: no budget applied.
  assert memory_budget.Limit() == 47 * 2**29
  monkeypatch.setattr(byte_sizes, 'MachineMemory', lambda: 128 * 2**30)
  assert memory_budget._InheritedWithinMachine('x') == (container, None)  # pylint: disable=protected-access
