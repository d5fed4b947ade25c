"""Cluster: logical CPU devices, device per split, errors."""

import pytest

from lingpipe.core import errors
from lingpipe.distributed import cluster
from lingpipe.distributed import remote
from lingpipe.model import model_registry


def test_logical_devices_exist():
  devices = cluster.LocalDevices()
  assert len(devices) >= 4 and devices[1].endswith('CPU:1')
  assert cluster.ConfigureLocalDevices(2) == ['/device:CPU:0', '/device:CPU:1']


@pytest.mark.parametrize('cores,devices,threads', [(2, 4, 2), (2, 2, 2), (16, 4, 4), (1, 1, 2), (8, 1, 2)])
def test_inter_op_threads_are_one_per_device_but_no_more_than_the_cores(monkeypatch, cores, devices, threads):
  monkeypatch.setattr(cluster.os, 'sched_getaffinity', lambda pid: set(range(cores)), raising=False)
  assert cluster.DefaultInterOpThreads(devices) == threads


def test_device_per_split_and_remote_names():
  c = cluster.Cluster(['/job:worker/task:0/device:GPU:0', '/job:worker/task:1/device:GPU:0'])
  assert c.Device(1) == '/job:worker/task:1/device:GPU:0' and c.num_replicas == 1
  with pytest.raises(errors.ConfigError, match='The pipeline has 3 splits but only 2 devices'):
    c.Device(0, num_splits=3)


def test_too_late_to_add_devices():
  with pytest.raises(errors.ConfigError, match='Cannot create 64 logical CPU devices'):
    cluster.ConfigureLocalDevices(64)


def test_max_num_splits_finds_pipelines_in_params():
  assert cluster.MaxNumSplits(model_registry.GetParams('synthetic.Mlp')) == 0
  assert cluster.MaxNumSplits(model_registry.GetParams('synthetic.DeepMlpGPipe')) == 2


def test_a_worker_that_only_failed_to_reach_a_dead_worker_is_not_named():
  dead = (0, '127.0.0.1:42665', 'it ran out of memory: the kernel killed it at its budget of 1.00 GiB')
  relayed = (1, '127.0.0.1:45397', 'UnavailableError: failed to connect to all addresses; last error: UNKNOWN: '
             'ipv4:127.0.0.1:42665: Failed to connect to remote host: Connection refused')
  assert remote._WithoutRelayed([dead, relayed]) == [dead]
  alone = (1, '127.0.0.1:45397', 'UnavailableError: Socket closed')
  assert remote._WithoutRelayed([dead, alone]) == [dead, alone]
  # Two workers that each name the other are both kept: neither is known to be the one alive.
  other = (0, '127.0.0.1:42665', 'UnavailableError: ipv4:127.0.0.1:45397: Connection refused')
  assert remote._WithoutRelayed([other, relayed]) == [other, relayed]
