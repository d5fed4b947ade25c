"""TF_CONFIG, as tf.distribute, Kubeflow and Vertex AI set it, gives lingpipe's binaries their cluster and task;
given with flags, the two must agree, and every mistake is one line."""

import json

import pytest

from lingpipe.core import errors
from lingpipe.distributed import tf_config
import trainer_test_util as util

_CLUSTER = {'chief': ['127.0.0.1:2220'], 'worker': ['127.0.0.1:2221', '127.0.0.1:2222']}


def _Env(task_type=None, index=None, cluster=None):
  config = {'cluster': cluster or _CLUSTER}
  if task_type is not None:
    config['task'] = {'type': task_type, 'index': index}
  return {'TF_CONFIG': json.dumps(config)}


def test_the_served_cluster_leaves_the_chief_out_and_the_task_comes_along():
  config = tf_config.Read(_Env('worker', 1))
  assert config == tf_config.TfConfig({'worker': _CLUSTER['worker']}, 'worker', 1)
  assert tf_config.Read({}) is None and tf_config.Read({'TF_CONFIG': ' '}) is None


def test_a_worker_takes_cluster_job_and_task_from_tf_config_where_flags_are_absent():
  assert tf_config.Resolve(environ=_Env('worker', 1)) == ({'worker': _CLUSTER['worker']},
                                                                             'worker', 1)
  spec = 'worker=127.0.0.1:2221,127.0.0.1:2222'
  assert tf_config.Resolve(spec, None, 1, _Env('worker', 1))[2] == 1  # Agreeing: fine.
  assert tf_config.Resolve(spec, 'worker', 0, {}) == ({'worker': _CLUSTER['worker']}, 'worker', 0)


@pytest.mark.parametrize('flags,message', [
    (dict(cluster_spec='worker=127.0.0.1:9999'), r'^--cluster_spec=\{"worker":\["127.0.0.1:9999"\]\} '
     r'and TF_CONFIG \(\{"worker":\["127.0.0.1:2221","127.0.0.1:2222"\]\}\) disagree; give one of them'),
    (dict(task=0), r'--task=0 and TF_CONFIG \(1\) disagree'),
    (dict(job='ps'), r'--job="ps" and TF_CONFIG \("worker"\) disagree')])
def test_a_flag_that_disagrees_with_tf_config_is_one_line(flags, message):
  with pytest.raises(errors.ConfigError, match=message):
    tf_config.Resolve(environ=_Env('worker', 1), **flags)


@pytest.mark.parametrize('task_type,index,cluster,message', [
    ('chief', 1, None, r"^TF_CONFIG's task is chief:1, but its cluster has 1 chief task \(index 0 to 0\)\.$"),
    ('chief', 0, {'worker': _CLUSTER['worker']}, r"^TF_CONFIG's task is chief:0, but its cluster has no 'chief' job "
     r"\(jobs: worker\)\.$"),
    ('worker', 2, None, r"^TF_CONFIG's task is worker:2, but its cluster has 2 worker tasks \(index 0 to 1\)\.$"),
    ('wroker', 0, None, r"no 'wroker' job \(jobs: chief, worker\)\. Did you mean: worker\?")])
def test_a_task_that_is_not_in_the_cluster_is_one_line(task_type, index, cluster, message):
  with pytest.raises(errors.ConfigError, match=message):
    tf_config.Read(_Env(task_type, index, cluster))


@pytest.mark.parametrize('text,message', [
    ('{"cluster": ', 'TF_CONFIG is not JSON'),
    ('{"task": {"type": "worker", "index": 0}}', 'TF_CONFIG has no "cluster" of jobs'),
    ('{"cluster": {"chief": ["h:1"]}}', "TF_CONFIG's cluster has only chief, which run no lingpipe-worker"),
    ('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": -1}}', "TF_CONFIG's task"),
    ('{"cluster": {"worker": ["nowhere"]}}', 'every job needs a list of host:port addresses')])
def test_a_malformed_tf_config_is_one_line(text, message):
  with pytest.raises(errors.ConfigError, match=message):
    tf_config.Read({'TF_CONFIG': text})


def test_the_trainer_is_the_chief_a_client_or_a_worker_task_that_serves():
  served = {'worker': _CLUSTER['worker']}
  assert tf_config.ForTrainer(environ=_Env('chief', 0)) == (served, None)
  assert tf_config.ForTrainer(environ=_Env()) == (served, None)
  assert tf_config.ForTrainer(environ=_Env('worker', 1)) == (served, 1)
  assert tf_config.ForTrainer('worker=h:1', 0, environ={}) == ({'worker': ['h:1']}, 0)
  assert tf_config.ForTrainer(environ={}) == (None, None)  # Local devices.
  for cluster in (_CLUSTER, dict(_CLUSTER, evaluator=['127.0.0.1:2230'])):  # Estimator's, and inside.
    assert tf_config.ForTrainer(environ=_Env('evaluator', 0, cluster), mode='eval') == (None, None)  # Its devices.
    with pytest.raises(errors.ConfigError, match=r'TF_CONFIG names this task evaluator:0, and this run is '
                       r"--mode=train; lingpipe has no evaluator role: run `lingpipe-train --mode=eval "):
      tf_config.ForTrainer(environ=_Env('evaluator', 0, cluster))
  with pytest.raises(errors.ConfigError, match=r'--task=0 and TF_CONFIG \(worker:1\) disagree'):
    tf_config.ForTrainer(task=0, environ=_Env('worker', 1))


@pytest.mark.parametrize('environ,expected', [
    (_Env('ps', 0, dict(_CLUSTER, ps=['127.0.0.1:2240'])), "TF_CONFIG names this task ps:0; the trainer runs as the "
     "chief"),
    (_Env('worker', 1), '--cluster_spec={"worker":["127.0.0.1:9"]} and TF_CONFIG ('),
])
def test_the_trainers_tf_config_errors_name_the_binary_once(capsys, monkeypatch, environ, expected):
  monkeypatch.setenv('TF_CONFIG', environ['TF_CONFIG'])
  flags = ['--cluster_spec=worker=127.0.0.1:9'] if expected.startswith('--cluster_spec') else []
  line = util.Error(capsys, '--model=synthetic.Mlp', '--mode=inspect', *flags)
  assert line.startswith(expected), line  # util.Error checked the one 'lingpipe-train: error: ' before it.
