"""The benchmark's precision section: float32 and a lower compute dtype side by side, plain and pipelined.

    python benchmarks/pipeline_benchmark.py --sections=precision --dtype=float32,bfloat16

For each workload (the dense stack 8 x 1024 at batch 2048, Table 1's Transformer T(8, 512, 4) at batch 256, and
with --precision_amoebanet AmoebaNet-D(6, 32) at batch 64), one SideBySide run of the plain model and K=2 at M=4
and M=8 (remat never) in every dtype of --dtype: step times, each dtype's throughput over float32's, each
pipeline's speed-up over the plain model in its own dtype, and for K=2, M=8 the step's peak memory beside the
memory planner's prediction. Then Keras's own mixed precision on the same dense stack (a tf.function step of a
keras.Sequential under the `mixed_bfloat16` policy) beside lingpipe's plain step in bfloat16.
"""

import statistics
import time

import numpy as np
import tensorflow as tf

from lingpipe.gpipe.planner import memory_plan
from lingpipe.gpipe.planner import partition

import workloads  # pylint: disable=g-import-not-at-top


def _Workloads(bench, dtypes, amoebanet):
  """{name: {dtype: Workload}} of the section's workloads in each dtype."""
  out = {}
  for dtype in dtypes:
    made = [workloads.Make('dense', dtype=dtype, batch=2048), workloads.Make('transformer', dtype=dtype, batch=256)]
    if amoebanet:
      made.append(workloads.InDtype(bench.AmoebaNet(), dtype))
    for base, w in zip(('dense 8 x 1024 + 10, batch 2048', 'transformer T(8,512,4), batch 256',
                        'AmoebaNet-D(6, 32), batch 64'), made):
      out.setdefault(base, {})[dtype] = w
  return out


def Run(bench, dtypes, amoebanet=False):
  """Prints and returns the section's results; `bench` is the pipeline_benchmark module (its Build, SideBySide)."""
  if 'float32' not in dtypes:
    dtypes = ['float32'] + list(dtypes)
  if len(dtypes) == 1:
    dtypes = ['float32', 'bfloat16']
  results = {}
  for base, by_dtype in _Workloads(bench, dtypes, amoebanet).items():
    print('\n## %s: %s side by side (plain, and K=2 remat never; speed-up over the plain model in the same dtype)' % (
        base, ' and '.join(dtypes)))
    print('%-10s %-10s %9s %11s %9s %10s %10s %8s' % ('dtype', 'config', 'step s', 'vs float32', 'speed-up',
                                                      'peak MiB', 'planner', '/peak'))
    rows = {}
    configs = {}
    for dtype, w in by_dtype.items():
      for name, config in (('plain', (None, 1, 'never')), ('K=2,M=4', (2, 4, 'never')), ('K=2,M=8', (2, 8, 'never'))):
        configs[(dtype, name)] = (w, config)
    measured = _SideBySide(bench, configs)
    for (dtype, name), r in measured.items():
      w, (k, m, remat) = configs[(dtype, name)]
      r['vs_float32'] = measured[('float32', name)]['step_s'] / r['step_s']
      r['speedup'] = measured[(dtype, 'plain')]['step_s'] / r['step_s']
      if k:
        shapes = tf.nest.map_structure(lambda t: t.shape.as_list(), w.inputs)
        layers = memory_plan.DescribeLayers(w.layers, shapes)
        cells = memory_plan.CellMemories(layers, partition.BalanceByCost([1] * len(w.layers), k), m, remat)
        r['predicted_mib'] = memory_plan.StepBytes(cells) / 2**20
      rows.setdefault(dtype, {})[name] = r
      print('%-10s %-10s %9.3f %11.2f %9.2f %10.1f %10s %8s' % (
          dtype, name, r['step_s'], r['vs_float32'], r['speedup'], r['peak_mib'],
          '%.1f' % r['predicted_mib'] if 'predicted_mib' in r else '-',
          '%.2f' % (r['predicted_mib'] / r['peak_mib']) if 'predicted_mib' in r else '-'), flush=True)
    for dtype in dtypes[1:]:
      ratio = rows[dtype]['K=2,M=8']['peak_mib'] / rows['float32']['K=2,M=8']['peak_mib']
      rows[dtype]['peak_vs_float32_k2m8'] = ratio
      print('K=2, M=8 step peak in %s / in float32: %.2f' % (dtype, ratio))
    results[base] = rows
  if 'bfloat16' in dtypes:
    results['keras_dense'] = KerasDense(bench)
  return results


def _SideBySide(bench, configs, rounds=None):
  """{key: {step_s, examples_per_s, peak_mib}} of configs {key: (workload, (k, m, remat))}, timed in alternation."""
  steps = {key: (bench.StepFunction(bench.Build(w, *config)), w.inputs) for key, (w, config) in configs.items()}
  for step, inputs in steps.values():
    step(inputs)
    step(inputs)
  times = {key: [] for key in steps}
  for _ in range(rounds or bench.ARGS.steps):
    for key, (step, inputs) in steps.items():
      times[key].append(bench.TimedStep(step, inputs))
  out = {}
  for key, (step, inputs) in steps.items():
    step_s = statistics.median(times[key])
    out[key] = dict(step_s=step_s, examples_per_s=tf.nest.flatten(inputs)[0].shape[0] / step_s,
                    peak_mib=bench.PeakMiB(step, inputs))
  return out


def KerasDense(bench, batch=2048, width=1024, num_layers=8):
  """Keras's mixed_bfloat16 against float32 on the dense stack, beside lingpipe's plain step in each dtype."""
  import keras  # pylint: disable=g-import-not-at-top
  print('\n## Keras on the dense stack %d x %d + 10, batch %d: float32 and mixed_bfloat16 policies, beside '
        'lingpipe\'s plain model' % (num_layers, width, batch))
  x = tf.constant(np.random.RandomState(0).normal(size=(batch, width)), tf.float32)
  steps = {}
  for policy in ('float32', 'mixed_bfloat16'):
    model = keras.Sequential([keras.Input((width,))] + [
        keras.layers.Dense(width, activation='relu', dtype=policy) for _ in range(num_layers)] + [
            keras.layers.Dense(10, dtype=policy)])

    @tf.function(autograph=False)
    def Step(inputs, model=model):
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.cast(model(inputs, training=True), tf.float32)))
      return loss, tape.gradient(loss, model.trainable_variables)

    steps['keras ' + policy] = (Step, x)
  for dtype in ('float32', 'bfloat16'):
    w = workloads.Make('dense', dtype=dtype, batch=batch, width=width, layers=num_layers)
    steps['lingpipe ' + dtype] = (bench.StepFunction(bench.Build(w)), w.inputs)
  for step, inputs in steps.values():
    step(inputs)
    step(inputs)
  times = {key: [] for key in steps}
  for _ in range(bench.ARGS.steps):
    for key, (step, inputs) in steps.items():
      start = time.perf_counter()
      tf.nest.map_structure(lambda t: t.numpy(), step(inputs))
      times[key].append(time.perf_counter() - start)
  out = {key: statistics.median(t) for key, t in times.items()}
  for key, step_s in out.items():
    print('%-26s %7.3f s/step' % (key, step_s))
  ratios = dict(keras_bf16_over_f32=out['keras float32'] / out['keras mixed_bfloat16'],
                lingpipe_bf16_over_f32=out['lingpipe float32'] / out['lingpipe bfloat16'],
                lingpipe_bf16_over_keras_bf16=out['keras mixed_bfloat16'] / out['lingpipe bfloat16'])
  print('bfloat16 over float32: Keras %.2fx, lingpipe %.2fx; lingpipe bfloat16 over Keras mixed_bfloat16: %.2fx' % (
      ratios['keras_bf16_over_f32'], ratios['lingpipe_bf16_over_f32'], ratios['lingpipe_bf16_over_keras_bf16']))
  return dict(step_s=out, **ratios)
