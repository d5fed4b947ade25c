"""The planner's speed model from measured layer times (layer_times.py, memory_plan.PredictedSpeedup)."""

import pytest

from lingpipe.gpipe.planner import layer_times
from lingpipe.gpipe.planner import memory_plan
from lingpipe.layers import linear
import pipeline_test_util as util


def test_each_distinct_layer_is_measured_once_at_the_given_batch():
  told = []
  # Layers large enough that their forward outlasts the cost of calling a traced function, which is left out.
  layers = util.Tanh(3, 256) + [linear.ProjectionLayer.Params().Set(name='wide', input_dim=256, output_dim=1024)]
  times = layer_times.Measure(layers, [64, 256], 2048, repeats=1, log=told.append)
  assert times.batch_size == 2048 and len(times.forward) == len(times.backward) == 4
  assert len(told) == 2 and 'at batch 2048' in told[0]  # The three alike layers once, the wide one once.
  assert times.forward[0] == times.forward[1] == times.forward[2] and all(t > 0 for t in times.forward)


@pytest.mark.parametrize('remat', ['always', 'never'])
def test_times_proportional_to_flops_predict_what_flops_predict(remat):
  """With each layer's time its flops (a backward two forwards) and a micro-batch 1/M of the batch's time, the
  measured-times model is the flops model."""
  described = memory_plan.DescribeLayers(util.Tanh(6, 32), [64, 32], trace=False)
  scale = 1e-9
  batch = layer_times.Times(64, tuple(f * scale for f in described.flops),
                            tuple(2 * f * scale for f in described.flops))
  for m in (1, 4, 8):
    micro = layer_times.Times(64 // m, tuple(t / m for t in batch.forward), tuple(t / m for t in batch.backward))
    for counts in ([6], [3, 3], [2, 1, 3]):
      by_flops = memory_plan.PredictedSpeedup(described, counts, m, remat)
      by_times = memory_plan.PredictedSpeedup(described, counts, m, remat, batch_times=batch, micro_times=micro)
      assert by_times == pytest.approx(by_flops, rel=1e-9)


def test_a_slow_layer_and_slow_micro_batches_lower_the_prediction():
  """Cut by flops, a layer that takes three times its flops' share makes its device the bottleneck; and micro-
  batches that run at half the batch's speed halve the pipelined throughput."""
  described = memory_plan.DescribeLayers(util.Tanh(2, 32), [64, 32], trace=False)
  even = layer_times.Times(64, (1.0, 1.0), (2.0, 2.0))
  slow_first = layer_times.Times(64, (3.0, 1.0), (6.0, 2.0))
  half = lambda t, m: layer_times.Times(64 // m, tuple(2 * x / m for x in t.forward),  # pylint: disable=g-long-lambda
                                        tuple(2 * x / m for x in t.backward))
  ideal = memory_plan.PredictedSpeedup(described, [1, 1], 4, 'never', batch_times=even,
                                       micro_times=layer_times.Times(16, (0.25, 0.25), (0.5, 0.5)))
  assert ideal == pytest.approx(2 * 4 / 5)  # Two devices, bubble (K-1)/(M+K-1).
  skewed = memory_plan.PredictedSpeedup(described, [1, 1], 4, 'never', batch_times=slow_first,
                                        micro_times=layer_times.Times(16, (0.75, 0.25), (1.5, 0.5)))
  # The slow device works 4 x (0.75 + 1.5) = 9 and waits 0.75 (the fast device's last forward, 0.25, and its
  # last micro-batch's backward, 0.5): 9.75 against the plain model's 12.
  assert skewed == pytest.approx(12 / 9.75)
  assert memory_plan.PredictedSpeedup(described, [1, 1], 4, 'never', batch_times=even,
                                      micro_times=half(even, 4)) == pytest.approx(ideal / 2)


def test_the_planner_tool_predicts_from_measured_times(capsys):
  import plan_pipeline  # pylint: disable=g-import-not-at-top
  candidates, best = plan_pipeline.Plan(plan_pipeline._Args(
      ['--model=synthetic.DeepMlpGPipe', '--devices=2', '--device_memory=64MiB', '--processes=devices',
       '--micro_batches=1,4', '--speed_model=measured']))
  out = capsys.readouterr().out
  assert best is not None and '# speed-ups from layer times measured here at batch' in out
  by_flops, _ = plan_pipeline.Plan(plan_pipeline._Args(
      ['--model=synthetic.DeepMlpGPipe', '--devices=2', '--device_memory=64MiB', '--processes=devices',
       '--micro_batches=1,4']))
  # The same configurations, their memory as planned before; only the predicted speed-ups differ.
  assert [c.peak for c in candidates] == [c.peak for c in by_flops]
  assert [c.speedup for c in candidates] != [c.speedup for c in by_flops]
