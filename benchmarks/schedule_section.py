"""The benchmark's schedules section: peak memory and step time of each schedule x remat, beside the planner.

    python benchmarks/pipeline_benchmark.py --sections=schedules

For the dense stack 8 x 1024 at batch 2048 and Table 1's Transformer T(8, 512, 4) (or --workload), K=2, M=8: each
of the four schedules with remat never and always, every one through FPropWithLoss (the path the trainer takes),
its step's peak memory above the weights beside the memory planner's prediction for the same cut, and its step time,
each as a ratio to gpipe's at the same remat.
"""

import itertools
import statistics

import tensorflow as tf

from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe.planner import memory_plan
from lingpipe.gpipe.planner import partition

import workloads  # pylint: disable=g-import-not-at-top

_NAMES = itertools.count()


def _Pipeline(model, k, m, remat, name, virtual_stages):
  v = virtual_stages if name == 'interleaved_1f1b' else 1
  pipe = pipelining_layer.PipeliningLayer.Params().Set(
      name='sched%d' % next(_NAMES), layers=[l.Copy() for l in model.layers], num_splits=k, num_micro_batches=m,
      remat=remat, schedule=name, virtual_stages=v, balance='uniform').Instantiate()
  if pipe.num_devices != k:  # The planner plans K devices (an earlier version ran interleaved on K x v).
    raise RuntimeError('Schedules section: %s runs on %d devices, planned on %d.' % (name, pipe.num_devices, k))
  return pipe, v


def Run(bench, model, k, m, steps, virtual_stages=2):
  """{'<schedule>_<remat>': {peak_mib, step_s, predicted_mib}} of one workload; `bench` is the pipeline_benchmark
  module (its TimedStep and PeakMiB)."""
  print('\n## Schedules, %s, K=%d, M=%d (interleaved v=%d): peak memory above the weights and step time' % (
      model.name, k, m, virtual_stages))
  print('%-6s %-17s %9s %9s %9s %8s %9s %8s' % ('remat', 'schedule', 'peak MiB', '/gpipe', 'planner', '/peak',
                                                 'step s', '/gpipe'))
  layers = memory_plan.DescribeLayers(model.layers, tf.nest.map_structure(lambda t: t.shape.as_list(), model.inputs))
  targets = tf.nest.flatten(model.inputs)[0]
  out = {}
  for remat in ('never', 'always'):
    for name in schedule_lib.SCHEDULES:
      pipe, v = _Pipeline(model, k, m, remat, name, virtual_stages)
      Step = workloads.TrainStep(pipe, targets)  # pylint: disable=invalid-name
      Step(model.inputs)
      Step(model.inputs)  # Warm-up.
      step_s = statistics.median(bench.TimedStep(Step, model.inputs) for _ in range(steps))
      counts = partition.BalanceByCost([1] * len(model.layers), k * v)
      cells = memory_plan.CellMemories(layers, counts, m, remat, schedule=name, num_devices=k)
      # The peak varies from step to step (the order the runtime picks among ready ops): the median of three.
      peak = statistics.median(bench.PeakMiB(Step, model.inputs) for _ in range(3))
      row = out['%s_%s' % (name, remat)] = dict(peak_mib=peak, step_s=step_s,
                                                 predicted_mib=memory_plan.StepBytes(cells) / 2**20)
      gpipe = out['gpipe_%s' % remat]
      print('%-6s %-17s %9.1f %9.2f %9.1f %8.2f %9.3f %8.2f' % (
          remat, name, row['peak_mib'], row['peak_mib'] / gpipe['peak_mib'], row['predicted_mib'],
          row['predicted_mib'] / row['peak_mib'], step_s, step_s / gpipe['step_s']), flush=True)
  return out
