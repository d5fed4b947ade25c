"""TF_CONFIG: the cluster and this task, as tf.distribute, Kubeflow's TFJob and Vertex AI give them to every task.

    TF_CONFIG='{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]},
                "task": {"type": "worker", "index": 0}}'

lingpipe-worker and lingpipe-train read it when --cluster_spec is absent (`Resolve`); given both, they must agree.
The chief is the trainer (and an evaluator a reader of checkpoints): they run no lingpipe-worker, so the cluster
lingpipe serves and connects to is TF_CONFIG's without those jobs (`SERVERLESS_JOBS`).
"""

import json
import os
from typing import NamedTuple, Optional

from lingpipe.core import errors
from lingpipe.distributed import remote

ENV_VAR = 'TF_CONFIG'
EVALUATOR = 'evaluator'
SERVERLESS_JOBS = ('chief', EVALUATOR)
# What an evaluator task runs: lingpipe has no evaluator role that follows the chief.
EVALUATOR_ADVICE = ("lingpipe has no evaluator role: run `lingpipe-train --mode=eval --logdir=<the chief's logdir>` "
                    "on this task, which evaluates the latest checkpoint on the task's own devices (rerun it as new "
                    'checkpoints come)')
_EXAMPLE = ('{"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"]}, '
            '"task": {"type": "worker", "index": 0}}')


class TfConfig(NamedTuple):
  spec: dict  # {job: [host:port, ...]} of the jobs that serve devices
  task_type: Optional[str]
  task_index: Optional[int]


def Read(environ=None):
  """The TfConfig of TF_CONFIG in `environ` (default: this process's), or None where it is unset or empty."""
  text = (os.environ if environ is None else environ).get(ENV_VAR, '').strip()
  if not text:
    return None
  try:
    config = json.loads(text)
  except ValueError as e:
    raise errors.ConfigError('TF_CONFIG is not JSON (%s); expected e.g. %s.' % (e, _EXAMPLE)) from e
  if not isinstance(config, dict) or not isinstance(config.get('cluster'), dict) or not config['cluster']:
    raise errors.ConfigError('TF_CONFIG has no "cluster" of jobs; expected e.g. %s.' % _EXAMPLE)
  served = {job: addresses for job, addresses in config['cluster'].items() if job not in SERVERLESS_JOBS}
  if not served:
    raise errors.ConfigError("TF_CONFIG's cluster has only %s, which run no lingpipe-worker; add the workers' job, "
                             'e.g. %s.' % (', '.join(sorted(config['cluster'])), _EXAMPLE))
  spec = remote.ParseClusterSpec(json.dumps(served))
  task = config.get('task') or {}
  task_type, index = (task.get('type'), task.get('index')) if isinstance(task, dict) else (None, None)
  if task_type is not None and not isinstance(task_type, str) or (
      index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0)):
    raise errors.ConfigError('TF_CONFIG\'s task %s: expected {"type": a job name, "index": an integer >= 0}.' % (
        json.dumps(task),))
  jobs = config['cluster']
  if task_type == EVALUATOR and EVALUATOR not in jobs:  # Estimator's convention: the evaluator is outside the cluster.
    return TfConfig(spec, task_type, index)
  if task_type is not None and task_type not in jobs:
    raise errors.ConfigError('TF_CONFIG\'s task is %s:%s, but its cluster has no %r job (jobs: %s).%s' % (
        task_type, index, task_type, ', '.join(sorted(jobs)), errors.DidYouMean(task_type, sorted(jobs))))
  if task_type is not None and index is not None and not (
      isinstance(jobs[task_type], list) and index < len(jobs[task_type])):
    count = len(jobs[task_type]) if isinstance(jobs[task_type], list) else 0
    raise errors.ConfigError('TF_CONFIG\'s task is %s:%d, but its cluster has %d %s task%s (%s).' % (
        task_type, index, count, task_type, '' if count == 1 else 's',
        'index 0 to %d' % (count - 1) if count else 'none'))
  return TfConfig(spec, task_type, index)


def Resolve(cluster_spec=None, job=None, task=None, environ=None):
  """(spec or None, job or None, task or None) a binary runs with: its flags (None where not given), each filled
  from TF_CONFIG where the flag is absent; a flag and TF_CONFIG that disagree are a one-line ConfigError."""
  return _Merged(Read(environ), cluster_spec, job, task)


def _Merged(config, cluster_spec, job, task):
  """Resolve's answer for the TfConfig `config` (or None)."""
  spec = remote.ParseClusterSpec(cluster_spec) if cluster_spec else None
  if config is None:
    return spec, job, task
  for flag, given, from_config in (('--cluster_spec', spec, config.spec), ('--job', job, config.task_type),
                                   ('--task', task, config.task_index)):
    if given is not None and from_config is not None and given != from_config:
      shown = remote.SpecText if flag == '--cluster_spec' else json.dumps
      raise errors.ConfigError('%s=%s and TF_CONFIG (%s) disagree; give one of them (unset TF_CONFIG or drop the '
                               'flag).' % (flag, shown(given), shown(from_config)))
  return (spec or config.spec, job if job is not None else config.task_type,
          task if task is not None else config.task_index)


def ForTrainer(cluster_spec=None, task=None, job='worker', environ=None, mode='train'):
  """(spec or None, own task or None) of lingpipe-train: its --cluster_spec and --task, else TF_CONFIG's. As the
  chief (or with no task named) it is a client of the workers; as task i of `job` (cluster.job, the job that holds
  the pipelines) it serves that task's devices too, as --task=i does. As an evaluator task, --mode=eval and
  decode run on the task's own devices (the workers are the chief's); training there is refused."""
  config = Read(environ)
  spec, task_type, own = _Merged(config, cluster_spec, None, None)
  if config is None or task_type in (None, 'chief'):
    return spec, task
  if task_type == EVALUATOR:
    if mode in ('eval', 'decode') and not cluster_spec:
      return None, None
    raise errors.ConfigError('TF_CONFIG names this task evaluator:%s, and this run is --mode=%s; %s.' % (
        own, mode, EVALUATOR_ADVICE))
  if task_type != job:
    raise errors.ConfigError('TF_CONFIG names this task %s:%s; the trainer runs as the chief (a '
                             'client of the workers) or as a task of job %r, which holds the pipelines.' % (
                                 task_type, own, job))
  if task is not None and task != own:
    raise errors.ConfigError('--task=%d and TF_CONFIG (%s:%s) disagree; give one of them (unset '
                             'TF_CONFIG or drop the flag).' % (task, task_type, own))
  return spec, own
