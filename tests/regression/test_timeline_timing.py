"""Regression tests of the timeline that depend on timing (which action's stamp comes first on a loaded machine)
or on how TensorFlow 2.21 builds loops and inlines functions. Each names the bug it guards against; they retry
over several steps, but a very loaded machine can still fail them, and a TensorFlow upgrade may need them
revisited."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe import timeline
import pipeline_test_util as util
import timeline_test_util as ttu


pytestmark = pytest.mark.slow  # Timing: the full tier only, never the quick loop.


def test_a_first_recomputation_runs_while_its_device_waits_for_the_gradient():
  """1F1B, K=2, M=2, remat always: cell 0 runs F0 F1 B0, so its first backward re-computes; that re-computation
  starts once F1 ends, while cell 1 still runs its backward of micro-batch 0, not once that backward's gradient
  arrives (backward_kinds.EARLY_RECOMPUTE). Cell 1 re-computes nothing: each of its backwards follows its forward
  (schedule.KeepWhereBackwardFollows)."""
  # Actions of several ms each: the margin below is half a backward, which must outlast a loaded machine's thread
  # wake-ups (with 256 x 256 layers each action took ~1 ms under oneDNN, and a 1.2 ms miss was seen).
  _, pipe = util.Pair(util.Tanh(4, dim=512), num_splits=2, num_micro_batches=2, remat='always', schedule='1f1b')
  x = tf.constant(np.random.RandomState(0).normal(size=(2048, 512)), tf.float32)
  recorder = timeline.Recorder()
  recorded = ttu.RecordedLossStep(pipe, ttu.SquaredSum, recorder)

  early = []
  for events in ttu.EachStep(recorded, x, recorder):
    assert ('recompute', 1, 0) not in events
    assert events[('forward', 0, 1)].end <= events[('recompute', 0, 0)].start
    assert events[('recompute', 0, 0)].end <= events[('backward', 0, 0)].start
    gradient = events[('backward', 1, 0)]
    early.append(events[('recompute', 0, 0)].start < (gradient.start + gradient.end) / 2)
  # Waiting for the gradient, it starts at 0.99-1.02 of the way through that backward in every step (the gradient
  # leaves with the backward's end); as planned, at -1.0 to 0.5 in most steps, loaded or not.
  assert any(early), early


@pytest.mark.parametrize('schedule_name', ['1f1b', 'zero_bubble'])
def test_an_inline_action_is_stamped_around_its_work(schedule_name):
  """Forwards traced inline (the loss inside, remat never) are stamped from outside (timeline.Timed). Once graph
  optimization had inlined the clock, its control edges no longer held: the last cell's Transformer forwards were
  recorded 0.0 ms wide, their work done after their end stamp. Both cells run alike layers on alike micro-batches,
  so their forwards take alike times."""
  import workloads  # pylint: disable=g-import-not-at-top  (benchmarks/, on the path: pytest.ini)
  workload = workloads.Make('transformer', layers=4, batch=64)
  pipe = pipelining_layer.PipeliningLayer.Params().Set(
      name='inline_%s' % schedule_name, layers=workload.layers, num_splits=2, num_micro_batches=2, remat='never',
      schedule=schedule_name).Instantiate()
  recorder = timeline.Recorder()

  def MeanSquare(out, unused):
    loss = tf.reduce_mean(tf.square(out.x))
    return loss, {'loss': (loss, tf.ones([]))}

  recorded = ttu.RecordedLossStep(pipe, MeanSquare, recorder, lambda inputs: inputs.paddings)

  widths = {}
  for _ in range(3):
    events = recorder.Events(recorded(workload.inputs)[1])
    for e in events:
      if e.kind == timeline.FORWARD:
        widths.setdefault(e.cell, []).append(e.end - e.start)
  assert min(widths[1]) > 0.3 * np.median(widths[0]), widths


def test_cells_overlap_while_recording():
  """Plain tf.timestamp ops are chained in program order by tf.function, which serialized every action: cell 0's
  forward of micro-batch 1 began only when cell 1's of micro-batch 0 had ended. Recording must not do that."""
  _, pipe = util.Pair(util.Tanh(4, dim=256), num_splits=2, num_micro_batches=4, remat='always')
  x = tf.constant(np.random.RandomState(0).normal(size=(512, 256)), tf.float32)
  recorder = timeline.Recorder()
  recorded, _ = ttu.RecordedSteps(pipe, x, recorder)
  overlaps = [events[('forward', 0, 1)].start < events[('forward', 1, 0)].end
              for events in ttu.EachStep(recorded, x, recorder)]
  assert any(overlaps), overlaps


def test_a_recorded_loop_leaves_its_iterations_free_to_overlap():
  """A stamped cell call is stateful; tf.function's automatic control dependencies made every loop variable of the
  next iteration wait for every stateful op of this one, so the devices ran a looped pass in lock step (across two
  worker processes, recording took 1.7x the step). The body needs no such edges: all it passes on is data."""
  _, pipe = util.Pair(util.Tanh(4, dim=16), num_splits=2, num_micro_batches=6, remat='always')
  x = tf.constant(np.random.RandomState(0).normal(size=(12, 16)), tf.float32)
  recorded, _ = ttu.RecordedSteps(pipe, x, timeline.Recorder())
  graph = recorded.get_concrete_function(x).graph
  bodies = [graph._get_function(op.get_attr('body').name).graph  # pylint: disable=protected-access
            for op in graph.get_operations() if op.type in ('While', 'StatelessWhile')]
  assert len(bodies) == 2  # The forward and the backward pass loop; their calls take timestamps.
  assert all(any(op.type == 'StatefulPartitionedCall' for op in body.get_operations()) for body in bodies)
  assert [body.control_outputs for body in bodies] == [[], []]
