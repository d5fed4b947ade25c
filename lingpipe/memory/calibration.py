"""Measures this machine's process model (memory/process_model.py) and gives what a pipeline choice must fit by it.

`Calibrate` trains synthetic.DenseStack at two depths, plain and on two workers, under a budget no larger than the
machine (memory_trials.py), and fits each kind of process's measured peak against the planner's: peak = intercept +
slope x allocator peak, the fullest worker for workers; the trainer beside workers, which holds no weights but the
step's graph, as intercept + slope x layers. `LocalBudget` and `WorkerBudget` pair a budget
(memory_budget.Limit) with the peak the model predicts, for --pipeline=auto.
"""

import datetime
import json
import sys

from lingpipe.core import byte_sizes
from lingpipe.core import cpu_kernels
from lingpipe.core import errors
from lingpipe.logdir import safe_write
from lingpipe.memory import memory_budget
from lingpipe.memory import memory_cgroup
from lingpipe.memory import memory_trials
from lingpipe.memory import process_model

_WORKLOAD = 'synthetic.DenseStack'
_SIZE = 'task.hidden_dim=2048;task.train.save_interval_steps=1000000'
_PLAIN = "task.network.num_splits=1;task.network.num_micro_batches=1;task.network.remat='never'"
_K2 = "task.network.num_splits=2;task.network.num_micro_batches=4;task.network.remat='always'"


def PlannerCandidates(model, override, micro_batches=None):
  """The planner's memory_plan.Candidates of `model` with params `override` in its own schedule, remat, cut and
  devices (the first PipeliningLayer's), each M of `micro_batches` (default: its own)."""
  from lingpipe.gpipe.choice import planning_view  # pylint: disable=g-import-not-at-top
  from lingpipe.model import model_registry  # pylint: disable=g-import-not-at-top
  p = model_registry.GetParams(model, 'Train')
  p.FromText(override)
  view = planning_view.Of(p)
  net, q = view.net, view.params
  candidates = view.Candidates(
      net.num_devices, micro_batches=micro_batches or (q.num_micro_batches,), remats=(q.remat,),
      schedules=(q.schedule,), balance=[len(net.CellLayers(k)) for k in range(net.num_cells)],
      virtual_stages=(q.virtual_stages,) if q.virtual_stages > 1 else ())
  return [c for c in candidates if c.num_splits == net.num_devices]


def DevicePeaks(model, override):
  """The planner's allocator peak of each device (bytes) of `model` with params `override`, in its own
  configuration (the first PipeliningLayer's K, M, remat, schedule and cut)."""
  return [cell.peak for cell in PlannerCandidates(model, override)[0].cells]


def _Fit(points):
  """ProcessModel through (allocator peak, measured) points (the line through the two extremes)."""
  (x0, y0), (x1, y1) = min(points), max(points)
  slope = (y1 - y0) / (x1 - x0) if x1 > x0 else 1.0
  return process_model.ProcessModel(y0 - slope * x0, slope)


def _MemTotal():
  with open('/proc/meminfo') as f:
    for line in f:
      if line.startswith('MemTotal:'):
        return int(line.split()[1]) * 1024 // 2
  return 8 * 2**30


class CalibrationError(errors.UserError, RuntimeError):
  """A calibration trial did not train, or its processes' memory could not be measured."""


def _Measured(trial, processes, depth, cap):
  """`trial`, if it trained and each of `processes` was measured; else raises CalibrationError."""
  missing = [name for name in processes if not trial.peaks.get(name)]
  if trial.ok and not missing:
    return trial
  raise CalibrationError('the trial of %s at %d layers under %s %s (its last line: %s)' % (
      _WORKLOAD, depth, byte_sizes.Format(cap), 'did not train' if not trial.ok else
      'trained, but the memory of %s could not be read from its cgroup' % ', '.join(missing), trial.line[-300:]))


def Calibrate(out=sys.stdout, depths=(4, 12), worker_depths=(8, 20), parts=process_model.PARTS):
  """Measures `parts` of this machine (the trainer's about 40 s, the workers' about 2 minutes), keeps them beside
  the parts measured before, and returns the Calibration."""
  cap, trainer_points, worker_points, clients = memory_trials.Cap(_MemTotal()), [], [], []
  for depth in depths if 'trainer' in parts else ():
    override = '%s;task.num_layers=%d;%s' % (_SIZE, depth, _PLAIN)
    trial = _Measured(memory_trials.Run(_WORKLOAD, override, 0, cap, 6), ['trainer'], depth, cap)
    predicted = DevicePeaks(_WORKLOAD, override)[0]
    trainer_points.append((predicted, trial.peaks['trainer']))
    print('process memory: plain, %d layers: planner %.0f MiB, measured %.0f MiB' % (
        depth, predicted / 2**20, trial.peaks['trainer'] / 2**20), file=out, flush=True)
  for depth in worker_depths if 'workers' in parts else ():
    override = '%s;task.num_layers=%d;%s' % (_SIZE, depth, _K2)
    trial = _Measured(memory_trials.Run(_WORKLOAD, override, 2, cap, 6), ['trainer', 'worker 0', 'worker 1'],
                      depth, cap)
    for cell, predicted in enumerate(DevicePeaks(_WORKLOAD, override)):
      worker_points.append((predicted, trial.peaks['worker %d' % cell]))
    clients.append((depth, trial.peaks['trainer']))
    print('process memory: K=2, %d layers: planner %s MiB, measured %s MiB, trainer %.0f MiB' % (
        depth, ', '.join('%.0f' % (x / 2**20) for x, _ in worker_points[-2:]),
        ', '.join('%.0f' % (y / 2**20) for _, y in worker_points[-2:]), clients[-1][1] / 2**20), file=out,
        flush=True)
  cached = process_model.Cached()
  machine = cpu_kernels.MachineKey()
  entry = dict(cached.get(machine) or {}, machine=machine, measured=datetime.date.today().isoformat())
  if trainer_points:
    entry['trainer'] = list(_Fit(trainer_points))
  if worker_points:
    # The fullest worker's excess at each size: the model must cover the worst process.
    by_size = [max(worker_points[i:i + 2], key=lambda xy: xy[1] - xy[0]) for i in (0, 2)]
    # The trainer beside workers holds the step's graph, which grows with the layers, not their weights.
    entry.update(worker=list(_Fit(by_size)), client=list(_Fit(clients)))
  cached[entry['machine']] = entry
  safe_write.AtomicWrite(process_model.CachePath(), json.dumps(cached, indent=2), 'process memory calibration')
  return process_model.Load(parts)


def LoadOrCalibrate(out=sys.stdout, parts=process_model.PARTS):
  """This machine's Calibration of `parts`, the missing ones measured first (and said)."""
  calibration = process_model.Load(parts)
  if calibration is None:
    missing = [part for part in parts if process_model.Load((part,)) is None]
    print('Measuring what a process of this machine holds beyond its allocator (%s; once; about %s; kept in %s)' % (
        ' and '.join({'trainer': 'one process', 'workers': 'workers'}[part] for part in missing),
        '40 seconds' if missing == ['trainer'] else '3 minutes', process_model.CachePath()), file=out, flush=True)
    Calibrate(out, parts=missing)
    calibration = process_model.Load(parts)
  return calibration


def _Measurable(parts, out):
  """(this machine's Calibration of `parts`, None; or None, why there is none): the one kept, else measured now where
  this process has a memory cgroup to measure processes by (LoadOrCalibrate)."""
  calibration = process_model.Load(parts)
  if calibration is not None:
    return calibration, None
  if memory_cgroup.OwnCgroup()[1] is None:
    return None, 'this machine has no memory cgroup to measure a process by'
  try:
    return LoadOrCalibrate(out, parts), None
  except CalibrationError as e:  # The choice goes on with less, and the next run measures again.
    return None, 'measuring this machine\'s process memory failed (nothing was kept): %s' % e


def LocalBudget(p, device_memory=None, on_gpus=False, out=None):
  """(budget bytes or None, peak_of(candidate), what peak_of gives) for choosing among local devices: the budget
  is `device_memory` (text, e.g. '1.5GiB'), else this process's (--memory_limit or its cgroup's limit). On GPUs
  a device's peak must fit it; on CPUs the logical devices share one process, whose peak is predicted from the
  devices' sum by this machine's measured process model (memory/process_model.py)."""
  budget = memory_budget.Limit(None, device_memory)
  if budget is None:
    return None, None, 'device peak'
  if on_gpus:
    return budget, (lambda c: c.peak), 'device peak'
  replicas = max(1, p.cluster.num_replicas)
  devices_sum = lambda c: replicas * sum(cell.peak for cell in c.cells)
  calibration, why_not = _Measurable(('trainer',), out)  # Local devices: one process.
  if calibration is None:
    print('%s%s: the budget is compared with the devices\' allocator peaks alone, which leave out what TensorFlow '
          'itself holds (a few hundred MiB).' % (why_not[0].upper(), why_not[1:]), file=out, flush=True)
    return budget, devices_sum, 'allocator peak'
  return budget, (lambda c: calibration.trainer.Peak(devices_sum(c))), 'process peak'


def WorkerBudget(mesh, device_memory=None, out=None):
  """(budget, peak_of, what) for choosing among the workers of `mesh`: --device_memory, else the smallest budget a
  worker reports (None: for speed alone); what must fit is the fullest worker's process, by this machine's
  measured model of a worker (memory/process_model.py) where it has a memory cgroup to measure it with."""
  budget = memory_budget.Limit(mesh, device_memory)
  if budget is None:
    return None, None, 'worker peak'
  calibration, why_not = _Measurable(('workers',), out)
  if calibration is None:
    if why_not.startswith('measuring'):
      print('%s%s: the workers\' budget is compared with their allocator peaks alone.' % (
          why_not[0].upper(), why_not[1:]), file=out, flush=True)
    return budget, (lambda c: max(cell.peak for cell in c.cells)), 'worker allocator peak'
  return budget, (lambda c: max(calibration.worker.Peak(cell.peak) for cell in c.cells)), 'worker process peak'
