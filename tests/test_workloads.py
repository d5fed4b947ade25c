"""The benchmark workloads and the decomposition of a speed-up that the benchmarks print."""

import argparse

import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.layers import sequential

import workloads  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.mark.parametrize('name', workloads.WORKLOADS)
def test_each_workload_builds_and_runs_with_its_sizes_from_flags(name):
  parser = argparse.ArgumentParser()
  workloads.AddFlags(parser)
  small = {'dense': ['--width=16'], 'transformer': ['--model_dim=16', '--hidden_dim=32', '--seq_len=4'],
           'conv': ['--channels=4', '--image_size=8']}[name]
  args = parser.parse_args(['--workload=' + name, '--layers=2', '--batch=4'] + small)
  workload = workloads.FromArgs(args)
  assert sorted(workloads.SizeFlags(args)) == sorted(['--workload=' + name, '--layers=2'] + small)
  layer = sequential.SequentialLayer.Params().Set(name='w_' + name, sub=workload.layers).Instantiate()
  with context.Training(True):
    out = layer.FProp(workload.inputs)
  assert tf.nest.flatten(out)[0].shape[0] == 4
  assert len(workload.layers) == 2 + (name == 'dense')  # dense adds its 10-way output layer.


def test_batch_lists_and_the_decomposition_multiplies_out():
  parser = argparse.ArgumentParser()
  workloads.AddFlags(parser, default='transformer', batch_list=True)
  assert workloads.Batches(parser.parse_args(['--batch=64,256'])) == [64, 256]
  assert workloads.Batches(parser.parse_args([])) == [64]
  times = {'K=1,M=1': 1.1, 'K=1,M=4': 1.3, 'K=2,M=4': 0.8}
  row = workloads.Decomposition(1.0, times, 2, [4])[4]
  assert row['speedup'] == pytest.approx(1.0 / 0.8)
  assert row['overhead'] * row['micro_batch_efficiency'] * row['schedule'] == pytest.approx(row['speedup'])
  assert row['ideal'] == pytest.approx(1.6) and row['schedule_ratio'] == pytest.approx(1.3 / 0.8 / 1.6)


def test_the_schedule_gain_factors_into_work_balance_and_busy_from_the_workers_cpu():
  times = {'K=1,M=4': 1.0, 'K=2,M=4': 0.7}
  # K=1: worker 0 computes 0.95 s of its 1 s step. K=2: 0.55 and 0.5 s (more work in all, cell 1 the busier).
  cpu = {'K=1,M=4': [0.95, 0.0], 'K=2,M=4': [0.5, 0.55]}
  row = workloads.ScheduleByWorker(times, cpu, 2, [4])[4]
  assert 2 * row['work'] * row['balance'] * row['busy'] == pytest.approx(row['schedule']) == pytest.approx(1 / 0.7)
  assert row['work'] == pytest.approx(0.95 / 1.05) and row['balance'] == pytest.approx(0.525 / 0.55)
  assert row['busy'] == pytest.approx((0.55 / 0.7) / 0.95) and row['ideal_busy'] == pytest.approx(0.8)
  assert 'extra_op' not in row
  # Of the 0.1 s more: 0.06 on the threads that run ops (0.9 -> 0.96), 0.04 on the others (0.05 -> 0.09).
  op_cpu = {'K=1,M=4': [0.9, 0.0], 'K=2,M=4': [0.46, 0.5]}
  row = workloads.ScheduleByWorker(times, cpu, 2, [4], op_cpu)[4]
  assert row['extra_op'] == pytest.approx(0.06 / 0.95) and row['extra_other'] == pytest.approx(0.04 / 0.95)
  assert 1 + row['extra_op'] + row['extra_other'] == pytest.approx(1 / row['work'])


def test_the_multiprocess_benchmark_medians_each_worker_cpu_over_rounds():
  import multiprocess_benchmark  # pylint: disable=g-import-not-at-top
  rounds = [{'K=2,M=4': dict(step_s=s, first_step_s=1.0, worker_cpu_s=c, worker_op_cpu_s=[x - 0.01 for x in c])}
            for s, c in ((0.3, [0.2, 0.3]), (0.5, [0.1, 0.25]), (0.4, [0.4, 0.26]))]
  assert multiprocess_benchmark.MedianRows(rounds) == {
      'K=2,M=4': dict(step_s=0.4, first_step_s=1.0, worker_cpu_s=[0.2, 0.26], worker_op_cpu_s=[0.19, 0.25])}


def test_the_multiprocess_benchmark_says_when_the_machine_was_busy():
  import multiprocess_benchmark  # pylint: disable=g-import-not-at-top
  assert multiprocess_benchmark.NoiseWarnings(1.97, {4: [1.50, 1.55], 8: [1.60, 1.62]}) == []
  ceiling, spread = multiprocess_benchmark.NoiseWarnings(2.50, {4: [1.50, 1.55], 8: [1.29, 2.18]})
  assert '2.50x' in ceiling and '--rounds' in ceiling
  assert 'M=8' in spread and '1.29-2.18' in spread
  assert multiprocess_benchmark.NoiseWarnings(1.9, {8: [2.0]}) == []  # One round has no spread.


def test_dtype_flag_makes_the_workload_compute_in_it():
  parser = argparse.ArgumentParser()
  workloads.AddFlags(parser)
  args = parser.parse_args(['--workload=transformer', '--layers=1', '--batch=2', '--model_dim=8', '--hidden_dim=8',
                            '--seq_len=4', '--dtype=float32,bfloat16'])
  assert workloads.Dtypes(args) == ['float32', 'bfloat16']
  plain, low = workloads.FromArgs(args), workloads.FromArgs(args, dtype='bfloat16')
  assert 'bfloat16' in low.name and 'bfloat16' not in plain.name
  assert low.inputs.x.dtype == tf.bfloat16 and low.inputs.paddings.dtype == tf.bfloat16
  layer = sequential.SequentialLayer.Params().Set(name='w_low', sub=low.layers).Instantiate()
  with context.Training(True):
    assert layer.FProp(low.inputs).x.dtype == tf.bfloat16
  assert all(v.dtype == tf.float32 for v in layer.variables)
