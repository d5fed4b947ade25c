"""What a process holds beyond its devices' allocator peak, measured once per machine and kept: the memory planner
adds it to predict a whole process's peak under a budget (a worker's, or the plain trainer's).

The allocator peak is what memory_plan predicts (weights, slots, gradients, stash, working set). A process also
holds the Python and TensorFlow runtime, its graphs, gRPC buffers, and what the allocator keeps beyond its peak;
measured here (AMD EPYC, cgroup v1) an idle worker is charged 267 MiB and a trainer's step runtime more. `Calibrate`
trains synthetic.DenseStack at two depths, plain and on two workers, under a budget no larger than the machine
(memory_trials.py), and fits each kind of process's measured peak against the planner's: peak = intercept + slope
x allocator peak, the fullest worker for workers; the trainer beside workers, which holds no weights but the
step's graph, as intercept + slope x layers.
The fit is kept in ~/.cache/lingpipe/process_memory.json (LINGPIPE_CACHE moves it) under a key of the machine
(TensorFlow, Python, CPU, kernel), so a new machine or TensorFlow is measured again.
"""

import datetime
import json
import os
import sys
from typing import NamedTuple

from lingpipe.core import cpu_kernels
from lingpipe.core import errors
from lingpipe.logdir import safe_write
from lingpipe.runners import memory_trials


class ProcessModel(NamedTuple):
  """A process's peak charge = intercept + slope x the allocator peak of its devices (bytes)."""
  intercept: float
  slope: float

  def Peak(self, allocator_bytes):
    return self.intercept + self.slope * allocator_bytes


class Calibration(NamedTuple):
  trainer: ProcessModel  # the plain model's process
  worker: ProcessModel  # a lingpipe-worker holding cells
  client: ProcessModel  # a trainer beside workers (no weights of its own): intercept + slope x layers (graph)
  machine: str
  measured: str  # the date


def CachePath():
  return os.path.join(os.environ.get('LINGPIPE_CACHE') or os.path.expanduser('~/.cache/lingpipe'),
                      'process_memory.json')


def _Cached():
  try:
    with open(CachePath(), encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


PARTS = ('trainer', 'workers')  # what Calibrate measures apart: the plain process; workers and a trainer beside them


def Load(parts=PARTS):
  """This machine's Calibration, or None where one of `parts` was never measured (the others' models are None)."""
  entry = _Cached().get(cpu_kernels.MachineKey())
  if not entry:
    return None
  models = {}
  for name in ('trainer', 'worker', 'client'):
    if isinstance(entry.get(name), list):
      models[name] = ProcessModel(*entry[name])
  needed = {'trainer': ['trainer'], 'workers': ['worker', 'client']}
  if any(name not in models for part in parts for name in needed[part]):
    return None
  return Calibration(models.get('trainer'), models.get('worker'), models.get('client'), entry['machine'],
                     entry['measured'])


_WORKLOAD = 'synthetic.DenseStack'
_SIZE = 'task.hidden_dim=2048;task.train.save_interval_steps=1000000'
_PLAIN = "task.network.num_splits=1;task.network.num_micro_batches=1;task.network.remat='never'"
_K2 = "task.network.num_splits=2;task.network.num_micro_batches=4;task.network.remat='always'"


def PlannerCandidates(model, override, micro_batches=None):
  """The planner's memory_plan.Candidates of `model` with params `override` in its own schedule, remat, cut and
  devices (the first PipeliningLayer's), each M of `micro_batches` (default: its own)."""
  from lingpipe.runners import planning_view  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  view = planning_view.Of(run_params.BuildModelParams(model, override=override))
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
  return ProcessModel(y0 - slope * x0, slope)


def _MemTotal():
  with open('/proc/meminfo') as f:
    for line in f:
      if line.startswith('MemTotal:'):
        return int(line.split()[1]) * 1024 // 2
  return 8 * 2**30


def Calibrate(out=sys.stdout, depths=(4, 12), worker_depths=(8, 20), parts=PARTS):
  """Measures `parts` of this machine (the trainer's about 40 s, the workers' about 2 minutes), keeps them beside
  the parts measured before, and returns the Calibration."""
  cap, trainer_points, worker_points, clients = _MemTotal(), [], [], []
  for depth in depths if 'trainer' in parts else ():
    override = '%s;task.num_layers=%d;%s' % (_SIZE, depth, _PLAIN)
    trial = memory_trials.Run(_WORKLOAD, override, 0, cap, 6)
    predicted = DevicePeaks(_WORKLOAD, override)[0]
    trainer_points.append((predicted, trial.peaks['trainer']))
    print('process memory: plain, %d layers: planner %.0f MiB, measured %.0f MiB' % (
        depth, predicted / 2**20, trial.peaks['trainer'] / 2**20), file=out, flush=True)
  for depth in worker_depths if 'workers' in parts else ():
    override = '%s;task.num_layers=%d;%s' % (_SIZE, depth, _K2)
    trial = memory_trials.Run(_WORKLOAD, override, 2, cap, 6)
    for cell, predicted in enumerate(DevicePeaks(_WORKLOAD, override)):
      worker_points.append((predicted, trial.peaks['worker %d' % cell]))
    clients.append((depth, trial.peaks['trainer']))
    print('process memory: K=2, %d layers: planner %s MiB, measured %s MiB, trainer %.0f MiB' % (
        depth, ', '.join('%.0f' % (x / 2**20) for x, _ in worker_points[-2:]),
        ', '.join('%.0f' % (y / 2**20) for _, y in worker_points[-2:]), clients[-1][1] / 2**20), file=out,
        flush=True)
  cached = _Cached()
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
  safe_write.AtomicWrite(CachePath(), json.dumps(cached, indent=2), 'process memory calibration')
  return Load(parts)


def LoadOrCalibrate(out=sys.stdout, parts=PARTS):
  """This machine's Calibration of `parts`, the missing ones measured first (and said)."""
  calibration = Load(parts)
  if calibration is None:
    missing = [part for part in parts if Load((part,)) is None]
    print('Measuring what a process of this machine holds beyond its allocator (%s; once; about %s; kept in %s)' % (
        ' and '.join({'trainer': 'one process', 'workers': 'workers'}[part] for part in missing),
        '40 seconds' if missing == ['trainer'] else '3 minutes', CachePath()), file=out, flush=True)
    calibration = Calibrate(out, parts=missing)
    calibration = Load(parts)
  return calibration


def Advice(p, budget, num_devices, remote):
  """What the planner says fits `budget` bytes a process for model params `p`: one sentence naming the override
  (or how many devices would fit), or '' where this machine has no calibration or the model no pipeline. Said when
  a process runs out of memory, so never the configuration that runs (p's), and where the planner said that one
  fits, with every prediction raised by as much as it was short at least (budget / its predicted peak)."""
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import ranking  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import planning_view  # pylint: disable=g-import-not-at-top
  calibration = Load(('workers',) if remote else ('trainer',))
  if calibration is None or not budget:
    return ''
  try:
    view = planning_view.Of(p)
  except errors.ConfigError:  # No pipeline, or one without input_shapes: nothing to plan.
    return ''
  q = view.params
  running = memory_plan.Candidate(q.schedule, q.remat, num_devices, q.num_micro_batches, (), (), 0.0, 0.0,
                                  q.virtual_stages).Override()

  def Best(devices, workers, scale=1.0):
    candidates = view.Candidates(devices, balance=q.balance if not q.cell_tpl else 'uniform')
    model = calibration.worker if workers else calibration.trainer
    peak_of = lambda c: scale * max(memory_plan.ProcessPeaks(c, model, one_process=not workers))
    ran = [c for c in candidates if c.Override() == running and c.num_splits == devices]
    others = [c for c in candidates if c.Override() != running]
    return ranking.Recommend(others, budget, peak_of), peak_of, peak_of(ran[0]) if ran else None

  _, _, predicted = Best(num_devices, remote)
  # It ran out of memory where it was predicted to fit: the planner was short by budget / predicted at least.
  scale = budget / predicted if predicted and predicted <= budget else 1.0
  raised = ' (the planner\'s peaks raised %.0f%%: it said %s fits, at %.0f MiB)' % (
      100 * (scale - 1), running, predicted / 2**20) if scale > 1 else ''
  best, peak_of, _ = Best(num_devices, remote, scale)
  if best is not None:
    return ('The planner says this fits %.0f MiB a process: --model_params_override="%s" (predicted peak %.0f MiB)%s.'
            % (budget / 2**20, best.Override(), peak_of(best) / 2**20, raised))
  for devices in range(num_devices + 1, 9 if calibration.worker is not None else 0):
    if devices > len(view.layers):
      break
    best, peak_of, _ = Best(devices, True, scale)
    if best is not None and remote:
      return ('The planner says %d workers of %.0f MiB fit it: --model_params_override="%s" (predicted peak %.0f '
              'MiB each)%s.' % (devices, budget / 2**20, best.Override(), peak_of(best) / 2**20, raised))
    if best is not None:
      return ('The planner says nothing fits %.0f MiB in one process; %d lingpipe-workers of that size would '
              '(tools/launch_local.py --workers=%d --worker_memory=%dMiB -- ... --model_params_override="%s")%s.' % (
                  budget / 2**20, devices, devices, budget // 2**20, best.Override(), raised))
  return 'The planner says nothing fits %.0f MiB a process with up to 8 workers%s.' % (budget / 2**20, raised)
