"""lingpipe-train --pipeline=auto: a model's pipeline fields set to 'auto' are chosen before it is built.

A PipeliningLayer's num_splits, num_micro_batches, remat, schedule and balance may each be 'auto' (--pipeline=auto
sets all five the overrides leave alone). The trainer measures the model's distinct layers on this machine at
the batch's and each micro-batch's size, in the model's dtype (gpipe/planner/layer_times.py), and takes the fastest
configuration the planner predicts to fit the budget (gpipe/choice/auto_config.py). The choice is written into the
params, so params.txt records it (with `auto_choice` saying on what machine); a resume, an eval or an export
reuses it without timing again.
"""

import datetime
from typing import Dict, List, Optional, Tuple

from lingpipe.core import byte_sizes
from lingpipe.core import cpu_kernels
from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.core import param_checks
from lingpipe.core import params_text
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe.choice import auto_config
from lingpipe.gpipe.choice import planning_view
from lingpipe.logdir import recorded_params
from lingpipe.memory import calibration
from lingpipe.runners import run_params

AUTO = param_checks.AUTO
FIELDS = pipelining_layer.AUTO_FIELDS
_PLACEHOLDERS = dict(num_splits=1, num_micro_batches=1, remat='always', schedule='gpipe', balance='uniform')


def Pending(p) -> List[Tuple[str, hyperparams.Params]]:
  """(path, params) of the pipelines of model params `p` with a field still 'auto'."""
  return [(path, pipe) for path, pipe in run_params.Pipelines(p.task, 'task')
          if any(pipe.Get(n) == AUTO for n in FIELDS)]


def MachineKey(num_devices):
  """The machine a choice among `num_devices` local devices is recorded with (cpu_kernels.MachineKey's, for speed)."""
  return '%s; %d device(s)' % (cpu_kernels.MachineKey(speed=True), num_devices)


def _ChoiceFacts(text) -> Dict[str, str]:
  """{key: value} of an auto_choice text 'configuration | machine=... | budget=...'."""
  facts = {}
  for part in text.split(' | ')[1:]:
    key, _, value = part.partition('=')
    facts[key] = value
  return facts


def _Recorded(recorded_text, path):
  """{field: value text} of the pipeline at `path` in a params.txt, when it records an automatic choice."""
  values = {key[len(path) + 1:]: value for key, value in recorded_params.Lines(recorded_text or '').items()
            if key.startswith(path + '.')}
  if not values.get('auto_choice', '').strip("'\" "):
    return None
  if any(values.get(name, '').strip("'\"") == AUTO for name in FIELDS):
    return None
  return values


def ReusesRecorded(p, recorded_text):
  """Whether every pipeline of `p` left 'auto' has a choice recorded in `recorded_text` (a run's params.txt)."""
  return all(_Recorded(recorded_text, path) is not None for path, _ in Pending(p))


def _Reuse(p, path, pipe, recorded, num_devices, out, workers=None):
  """Takes the recorded choice for the fields still 'auto'; says so, and says a changed machine (or worker set:
  `workers`, the cluster's worker count per replica, refuses a recorded K it cannot hold)."""
  auto = [name for name in FIELDS if pipe.Get(name) == AUTO]
  p.FromText('\n'.join('%s.%s : %s' % (path, name, recorded[name]) for name in auto + ['virtual_stages',
                                                                                        'auto_choice']
                       if name in recorded))
  facts = _ChoiceFacts(pipe.auto_choice)
  line = ("Pipeline %s: the run's recorded configuration (K=%d, M=%d, remat=%s, %s, balance %s; chosen %s), not "
          'timed again.' % (path, pipe.num_splits, pipe.num_micro_batches, pipe.remat, pipe.schedule,
                            params_text.EncodeValue(pipe.balance), facts.get('date', 'earlier')))
  machine = facts.get('machine', '')
  here = MachineKey(num_devices) if workers is None else '%d worker(s)' % workers
  if workers is not None and pipe.num_splits > workers:
    raise errors.ConfigError(
        "Pipeline %s: the run's recorded configuration has K=%d cells, chosen on %s; this cluster has %d worker(s) "
        'per replica. Start the workers it was chosen on, or start a new logdir (or set %s.num_splits) to choose '
        'again among these.' % (path, pipe.num_splits, _Machine(machine), workers, path))
  if machine and _Machine(machine) != here:
    line += (' It was chosen on %s; this is %s. To choose again here, start a new logdir or set the fields.' % (
        _Machine(machine), here))
  print(line, file=out, flush=True)


def _Machine(key):
  """A recorded machine key as said in a message: 'N worker(s)' for a cluster's 'workers <device>, ...'."""
  if key.startswith('workers '):
    return '%d worker(s)' % len(key[len('workers '):].split(', '))
  return key


def _View(p, path, pipe):
  """The planning_view.View of the pipeline at `path`, from model params `p` with its 'auto' fields at placeholder
  values."""
  view = p.Copy()
  view_pipe = dict(run_params.Pipelines(view.task, 'task'))[path]
  for name in FIELDS:
    if view_pipe.Get(name) == AUTO:
      view_pipe.Set(**{name: _PLACEHOLDERS[name]})
  planned = planning_view.Of(view, pipe.name, what='choose')
  if planned.params.cell_tpl:
    raise errors.ConfigError("%s: 'auto' chooses the cut of a flat list of `layers`; this pipeline gives its cells "
                             '(cell_tpl). Set num_splits to len(cell_tpl).' % path)
  return planned


def Resolve(p, num_devices, budget=None, peak_of=None, what='peak', recorded_text=None, out=None, log=None,
            measure=True, devices=None, workers=None) -> Optional[auto_config.Choice]:
  """Chooses the 'auto' fields of the (one) pipeline of model params `p` in place and prints the choice; reuses
  a choice `recorded_text` (a run's params.txt) holds. `budget`: bytes or None; `peak_of(candidate)`: what must
  fit it (default the fullest device's peak), `what` names it. `devices`: the devices to choose among (a cluster's
  workers'; default the first `num_devices` local ones). `workers`: on a cluster, its worker count per replica, which a
  reused choice must fit. Returns the Choice, or None when nothing was chosen here."""
  pending = Pending(p)
  if not pending:
    return None
  if len(pending) > 1:
    raise errors.ConfigError("Only one pipeline can be chosen automatically; %s all have fields set to 'auto'. Set "
                             'the others\' fields.' % ', '.join(path for path, _ in pending))
  path, pipe = pending[0]
  fixed = {name: pipe.Get(name) for name in FIELDS if pipe.Get(name) != AUTO}
  recorded = _Recorded(recorded_text, path)
  if recorded is not None:
    changed = [name for name in fixed if params_text.EncodeValue(fixed[name]) != recorded.get(name)]
    if not changed:
      _Reuse(p, path, pipe, recorded, num_devices, out, workers)
      return None
    print('Pipeline %s: %s set differently from the recorded choice (%s); choosing again.' % (
        path, ', '.join(changed), '; '.join('%s : %s' % (n, recorded.get(n)) for n in changed)), file=out)
  if 'num_splits' in fixed and fixed['num_splits'] > num_devices:
    raise errors.ConfigError('%s.num_splits=%d, but %d device(s) are available to choose the rest with; give '
                             '--pipeline_devices=%d or fewer cells.' % (path, fixed['num_splits'], num_devices,
                                                                          fixed['num_splits']))
  view = _View(p, path, pipe)
  net = view.net
  start = datetime.datetime.now()
  choice = auto_config.ChooseFor(view.layers, view.input_shapes, num_devices, fixed, budget, peak_of,
                                 net.fprop_dtype, dtype_size=view.params.dtype.size, slots=view.slots,
                                 batch_dim=view.params.batch_dim, log=log, measure=measure,
                                 input_dtypes=view.params.input_dtypes, devices=devices)
  seconds = (datetime.datetime.now() - start).total_seconds()
  fields = auto_config.Fields(choice.chosen)
  for name in [n for n in FIELDS if n not in fixed] + ['virtual_stages']:
    pipe.Set(**{name: fields[name]})
  chosen = auto_config.Describe(choice.chosen)
  pipe.auto_choice = ' | '.join([
      chosen, 'machine=%s' % (MachineKey(num_devices) if devices is None else 'workers %s' % ', '.join(devices)),
      'budget=%s' % (byte_sizes.Format(budget) if budget else 'none'), 'date=%s' % start.date().isoformat()])
  print('Pipeline %s chosen (%s; %d device(s), %s; %s in %.1f s):' % (
      path, ', '.join(n for n in FIELDS if n not in fixed) + " were 'auto'", num_devices,
      'budget %s less %d%%' % (byte_sizes.Format(budget), round(auto_config.MARGIN * 100)) if budget else
      'no memory budget: chosen for speed alone', 'layers timed here' if measure else 'flops', seconds),
        file=out)
  for line in auto_config.Report(choice, what):
    print('  ' + line, file=out)
  print('  Recorded in params.txt; a resume reuses it. As an override: --model_params_override="%s"' % ';'.join(
      '%s.%s=%s' % (path, n, params_text.EncodeValue(fields[n]).replace(' ', ''))
      for n in FIELDS + ('virtual_stages',) if n not in fixed and (n != 'virtual_stages' or fields[n] > 1)),
        file=out, flush=True)
  return choice


def AmongLocalDevices(p, spec=None, recorded_text=None, pipeline_devices=None, device_memory=None, out=None):
  """The trainer's choice of the pipeline fields of `p` left 'auto' among its local devices (`pipeline_devices`, else
  one per GPU or core), within `device_memory` (text) or this process's budget; a choice `recorded_text` (the run's
  params.txt) holds is reused. With a cluster `spec` only a recorded choice is taken here (checked against the
  workers' number): a new one is made among the workers once connected (AmongWorkers). Returns the Choice or None."""
  if not Pending(p) or (spec is not None and not ReusesRecorded(p, recorded_text)):
    return None
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  replicas = max(1, p.cluster.num_replicas)
  workers = None if spec is None else max(1, len(spec[p.cluster.job]) // replicas)
  total = cluster.LocalDeviceCount(pipeline_devices)
  if spec is None and total > 1:
    cluster.ConfigureLocalDevices(total)  # Before the layers are timed: TensorFlow starts then.
  budget, peak_of, what = calibration.LocalBudget(p, device_memory, bool(tf.config.list_physical_devices('GPU')), out)
  return Resolve(p, max(1, total // replicas), budget, peak_of, what, recorded_text=recorded_text, out=out,
                 workers=workers)


def AmongWorkers(p, spec, own_task, recorded_text=None, device_memory=None, out=None):
  """The mesh of the cluster `spec`'s workers for model params `p`, connected as task `own_task` (or a client).
  Where pipeline fields are left 'auto' (and no recorded choice took them: AmongLocalDevices), it connects to every
  worker and chooses among them (layers timed on the first, the best candidates stepped across them, within
  `device_memory` or the smallest budget a worker reports), then gives the mesh of the chosen K."""
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
  if not Pending(p):
    return remote.Connect(spec, p.cluster, cluster.MaxNumSplits(p), own_task)
  every = max(1, len(spec[p.cluster.job]) // max(1, p.cluster.num_replicas))
  mesh = remote.Connect(spec, p.cluster, every, own_task)
  with cluster.Use(mesh):
    budget, peak_of, what = calibration.WorkerBudget(mesh, device_memory, out)
    Resolve(p, len(mesh.devices[0]), budget, peak_of, what, recorded_text=recorded_text, out=out,
            devices=list(mesh.devices[0]))
  return WorkersWithSplits(mesh, p.cluster, cluster.MaxNumSplits(p))


def WorkersWithSplits(connected, params, num_splits):
  """The workers `connected` (Connect's) as a mesh of `num_splits` cells a replica: after --pipeline=auto, which
  connects to every worker to choose among them, chose K."""
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import remote  # pylint: disable=g-import-not-at-top
  slots = cluster.RemoteSlots(connected.job, params.device_type, params.devices_per_task)
  mesh = cluster.Cluster.FromParams(params, num_splits, slots, remote_job=connected.job)
  remesh = remote.RemoteCluster(mesh.devices, connected.spec, connected.job, connected.own_task,
                                connected.timeout_s, connected.identities)
  remesh.at_connect = connected.at_connect
  return remesh
