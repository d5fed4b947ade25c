"""Training trials in fresh processes, each under a memory cap, with every process's peak measured: what the capacity
benchmark bisects on and what the planner's per-machine calibration (calibration.py) fits.

A trial runs lingpipe-train (the plain model in one process, or a trainer beside `workers` lingpipe-workers), every
process under `cap` bytes (--memory_limit), and samples each process's charge (memory_cgroup.Charge: anonymous and
mapped memory, what its cgroup cannot reclaim) every 50 ms; it trained if the run ended with its checkpoint.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import NamedTuple

from lingpipe.core import processes
from lingpipe.distributed import local_cluster
from lingpipe.memory import memory_budget
from lingpipe.memory import memory_cgroup


class Trial(NamedTuple):
  ok: bool
  peaks: dict  # process name -> bytes (measured)
  seconds: float
  line: str  # the trainer's last line


def _Children(pid):
  try:
    with open('/proc/%d/task/%d/children' % (pid, pid)) as f:
      return [int(c) for c in f.read().split()]
  except OSError:
    return []


class Sampler:
  """Samples the charge (memory_cgroup.Charge) of named processes every 50 ms; `peaks` keeps each one's largest."""

  def __init__(self, pids):
    self.pids, self.peaks = dict(pids), {}
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._Run, daemon=True)

  def _Run(self):
    while not self._stop.wait(0.05):
      for name, pid in list(self.pids.items()):
        charge = memory_cgroup.Charge(pid)
        if charge:
          self.peaks[name] = max(self.peaks.get(name, 0), charge)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *unused):
    self._stop.set()
    self._thread.join()


_TRIAL_DIR = re.compile(r'^lingpipe-trial-(\d+)-')


def _TrialDir(scratch):
  """A new folder for a trial's logdir, named by this process (lingpipe-trial-<pid>-*); those of processes that no
  longer run (killed during a trial) are removed first."""
  parent = scratch or tempfile.gettempdir()
  try:
    for name in os.listdir(parent):
      m = _TRIAL_DIR.match(name)
      if m and not processes.Alive(int(m.group(1))):
        shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
  except OSError:
    pass
  return tempfile.mkdtemp(dir=parent, prefix='lingpipe-trial-%d-' % os.getpid())


def Cap(cap):
  """The cap a trial can have here: `cap`, at most the limit of a cgroup this process inherited (a container's),
  which its trials cannot leave (a budget lingpipe made for this process they do leave: _Outside)."""
  inherited = memory_cgroup.Inherited()
  return cap if inherited is None or _Outside() else min(cap, inherited.limit)


def _Outside():
  return memory_cgroup.OutsideOwnBudget(memory_budget.Current())


def Run(model, override, workers, cap, steps, scratch=None):
  """Trains `model` with params `override` for `steps` steps: in one process (`workers` 0) or with a trainer beside
  `workers` lingpipe-workers, every process under `cap` bytes (and outside this process's own budget: they measure
  the machine). Returns a Trial."""
  logdir = _TrialDir(scratch)
  command = [sys.executable, '-m', 'lingpipe.trainer', '--model=' + model, '--logdir=' + logdir,
             '--max_steps=%d' % steps, '--memory_limit=%d' % cap, '--model_params_override=' + override]
  start = time.time()
  try:
    if workers:
      with local_cluster.LocalCluster(workers, memory_limit=str(cap), log_dir=os.path.join(logdir, 'logs'),
                                      ready_timeout_s=120, cgroup_procs=_Outside()) as cluster:
        pids = {'worker %d' % t: p.pid for t, p in enumerate(cluster.processes)}
        return _Train(command + ['--cluster_spec=' + cluster.spec_text], pids, start)
    return _Train(command, {}, start)
  finally:
    shutil.rmtree(logdir, ignore_errors=True)


def SaveRestoreEval(model, override, workers, cap, steps, scratch=None):
  """{phase: {process: peak bytes}} of a trainer beside `workers` capped workers in each of: training `steps` steps
  with a save at the end ('train and save'), resuming to save again ('restore and save') and evaluating ('eval');
  None for a phase that failed. The trainer holds no variable: its peak should not grow with the model; a worker
  restores one variable at a time, so a model that trains also resumes."""
  logdir = _TrialDir(scratch)
  base = [sys.executable, '-m', 'lingpipe.trainer', '--model=' + model, '--logdir=' + logdir,
          '--memory_limit=%d' % cap, '--model_params_override=' + override]
  peaks = {}
  try:
    with local_cluster.LocalCluster(workers, memory_limit=str(cap), log_dir=os.path.join(logdir, 'logs'),
                                    ready_timeout_s=120, cgroup_procs=_Outside()) as cluster:
      pids = {'worker %d' % t: p.pid for t, p in enumerate(cluster.processes)}
      spec = '--cluster_spec=' + cluster.spec_text
      for phase, extra in (('train and save', ['--max_steps=%d' % steps]),
                           ('restore and save', ['--max_steps=%d' % (steps + 1)]),
                           ('eval', ['--mode=eval'])):
        trial = _Train(base + extra + [spec], pids, time.time(), done=('Wrote ' if phase == 'eval' else None))
        peaks[phase] = trial.peaks if trial.ok else None
  finally:
    shutil.rmtree(logdir, ignore_errors=True)
  return peaks


def _Train(command, pids, start, done=None):
  # Ended with this process (a parent-death signal: the trial's guard passes it on), outside its budget.
  trainer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=local_cluster.ChildSetup(cgroup_procs=_Outside()))
  deadline = time.time() + 30
  while not _Children(trainer.pid) and trainer.poll() is None and time.time() < deadline:
    time.sleep(0.02)  # Its guard (the process started) forks the trainer itself, in its budget.
  with Sampler(dict(pids, trainer=(_Children(trainer.pid) or [trainer.pid])[0])) as sampler:
    out, _ = trainer.communicate()
  lines = out.strip().splitlines() or ['']
  ok = trainer.returncode == 0 and any(line.startswith(done or 'Saved checkpoint') for line in lines)
  return Trial(ok, sampler.peaks, time.time() - start, lines[-1])


