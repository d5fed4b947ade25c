"""Regression tests that pin the graphs TensorFlow builds for a pipeline step: node types, counts and control
inputs. Each guards a bug that the behaviour tests (transparency, memory) would show only as a slower step or a
higher peak. Written for TensorFlow 2.21; a TensorFlow upgrade that changes how it lowers loops, inlines functions
or builds gradients may break them without breaking lingpipe, and then they need revisiting, not deleting."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.gpipe.engine import executor
import pipeline_test_util as util


def _Input(batch=8, dim=8, seed=1):
  return tf.constant(np.random.RandomState(seed).normal(size=(batch, dim)).astype(np.float32))


@pytest.mark.parametrize('policy', ['never', 'always'])
def test_a_taped_cells_gradient_is_built_once_though_the_callers_tape_watches_too(policy, monkeypatch):
  """The caller's tape (here LossAndGrads') must not see inside the pipeline's custom gradient: were it watching
  the cells' inputs and parameters with the executor's tapes, TensorFlow would prepare each taped cell call for
  higher-order gradients and build its gradient three times (executor.CutFromCallerTapes)."""
  from tensorflow.python.ops import gradients_util  # pylint: disable=g-import-not-at-top
  built = []
  build = gradients_util._GradientsHelper  # pylint: disable=protected-access

  def Counting(ys, *args, **kwargs):
    built.append(tf.nest.flatten(ys)[0].graph)
    return build(ys, *args, **kwargs)

  monkeypatch.setattr(gradients_util, '_GradientsHelper', Counting)
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=4, remat=policy)
  util.LossAndGrads(pipe, _Input(batch=8))
  cells = [graph for graph in built if graph.name.startswith('Cell')]
  assert len(cells) == len(set(cells)) == 2, [graph.name for graph in built]


def test_the_callers_tape_is_cut_on_the_device_of_each_tensor(monkeypatch):
  """A cut left unplaced was put off the cell's device: each step copied a cell's parameters there and back
  (dense workload, two worker processes: cell 1 started 18 ms after its input had arrived, measured)."""
  cut, placed = executor.CutFromCallerTapes, []

  def Recording(inputs, params, devices):
    inputs, params = cut(inputs, params, devices)
    placed.extend((devices[0], t) for t in tf.nest.flatten(inputs))
    placed.extend((d, t) for p, d in zip(params, devices) for t in tf.nest.flatten(p))
    return inputs, params

  monkeypatch.setattr(executor, 'CutFromCallerTapes', Recording)
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=4, remat='never')
  util.LossAndGrads(pipe, _Input(batch=8))
  for device, t in placed:
    assert t.op.device == tf.DeviceSpec.from_string(device).to_string(), (t, device)
  # Each cell's parameters (two layers, a weight and a bias each) on the cell's device; the inputs on cell 0's.
  params = [device for device, t in placed if t.op.inputs[0].op.type == 'ReadVariableOp']
  assert params == [pipe.devices[0]] * 4 + [pipe.devices[1]] * 4, placed
  assert {device for device, t in placed if t.op.inputs[0].op.type != 'ReadVariableOp'} == {pipe.devices[0]}


@pytest.mark.parametrize('policy,calls', [('always', 16), ('except_last', 16), ('never', 12)])
def test_steady_ticks_run_as_a_loop_so_the_graph_does_not_grow_with_m(policy, calls):
  """Guards: unrolled passes, whose graph (and time to first step) grew with M."""
  counts = {}
  for m in (8, 32):
    _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=m, remat=policy)
    counts[m] = util.CellCalls(util.StepGraph(pipe, _Input(batch=32)))
  # Per pass: K(K+1)/2 fill tasks + K in the loop body + K(K-1)/2 drain tasks = K(K+1) = 6 for K=2. Under 'never'
  # every forward keeps its activations, as data on a stack (step_facts.StepFacts.saves), and the steady ticks loop. The
  # last micro-batch of 'except_last' keeps its activations unlike the others: its ticks break the pattern and run
  # unrolled, 2 more calls per pass (phase_loop.SteadyTicks). In GPipe 'always' keeps that micro-batch's
  # activations too: its backward comes next on its device (schedule.KeepWhereBackwardFollows).
  assert counts == {8: calls, 32: calls}


@pytest.mark.parametrize('policy', ['always', 'never'])
def test_a_looped_micro_batch_is_gathered_when_its_device_gets_to_it(policy):
  """In a loop a micro-batch (cell 0's inputs, the last cell's gradients, cell 0's re-computed inputs) is a
  gather, a copy. Left free, the iterations ran ahead and made every copy at the loop's start: dense stack, K=2,
  M=8, 'always', peak 90 MiB looped against 79 unrolled; 78-82 with each gather waiting for its device's previous
  action (executor._Interpreter.MicroBatch)."""
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=8, remat=policy)
  graph = util.StepGraph(pipe, _Input(batch=32))
  bodies = [f for f in graph.library.function if 'body' in f.signature.name]
  assert len(bodies) == 2, [f.signature.name for f in bodies]
  gathers = 0
  for body in bodies:
    nodes = {n.name: n for n in body.node_def}
    waits = lambda n: any(i.startswith('^') for i in n.input)
    for n in body.node_def:
      if n.op == 'GatherV2':  # It waits, or its axis does (TensorFlow drops a control input its data implies).
        gathers += 1
        assert waits(n) or any(waits(nodes[i.split(':')[0]]) for i in n.input if i.split(':')[0] in nodes), n.name
  assert gathers >= 2


@pytest.mark.parametrize('policy', ['always', 'never'])
def test_the_forward_loop_carries_the_parameters_packed_and_the_backward_each_sum_once(policy):
  """A loop variable is lowered to five control-flow nodes. With twice the layers, the forward pass's loop has as
  many variables (the parameters are packed: phase_loop.Invariant), and the backward pass's has one more per
  gradient sum and at most one per parameter it reads (under 'never' the biases' are not): a device's next action
  waits for the sum through State.accumulated, not a second copy of it in State.last. Before, each parameter was
  one variable of each loop and each sum two."""
  def LoopVariables(num_layers):
    _, pipe = util.Pair(util.Tanh(num_layers), num_splits=2, num_micro_batches=8, remat=policy)
    graph = util.StepGraph(pipe, _Input(batch=32))
    functions = {f.signature.name: f for f in graph.library.function}
    loops = [n for n in list(graph.node) + [n for f in functions.values() for n in f.node_def]
             if n.op in ('While', 'StatelessWhile')]
    assert len(loops) == 2, [n.name for n in loops]
    # The forward pass's body runs cell calls that save nothing for a tape; tell the two loops apart by order of
    # tracing instead: the forward loop is traced first, and TensorFlow numbers its body first.
    loops.sort(key=lambda n: int(n.attr['body'].func.name.rsplit('_', 1)[-1]))
    return [len([i for i in n.input if not i.startswith('^')]) for n in loops], len(pipe.trainable_variables)

  (small, small_params), (large, large_params) = LoopVariables(4), LoopVariables(8)
  assert large_params > small_params
  assert large[0] == small[0]
  assert large_params - small_params <= large[1] - small[1] <= 2 * (large_params - small_params)


def test_the_recomputing_backward_copies_the_cells_ops_instead_of_calling_them():
  """A call that is not inlined keeps its inputs alive until it ends: called, the backward would hold every
  re-computed activation through the whole backward (peak +20-25% under 'always', measured), and a called forward
  is instantiated again inside each re-computing backward function. Both are copied into it: it calls only what is
  inlined before it runs, the forward and backward of the function its layers' kind shares (layer_functions.py),
  once per layer each."""
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=4, remat='always')
  x = tf.constant(np.random.RandomState(3).normal(size=(8, 8)), tf.float32)
  library = util.StepGraph(pipe, x).library.function
  by_name = {f.signature.name: f for f in library}
  steps = [f for f in library if '_Step_' in f.signature.name]
  assert len(steps) == 2, [f.signature.name for f in library]
  for f in steps:
    calls = [by_name[n.attr['f'].func.name] for n in f.node_def
             if n.op in ('PartitionedCall', 'StatefulPartitionedCall')]
    assert not [c.signature.name for c in calls if '_noinline' in c.attr], [c.signature.name for c in calls]
    ops_of = lambda op_type, functions: sum(n.op == op_type for g in functions for n in g.node_def)
    assert ops_of('Tanh', [f]) + ops_of('TanhGrad', [f]) == 0
    # Two layers per cell, re-computed and differentiated.
    assert (ops_of('Tanh', calls), ops_of('TanhGrad', calls)) == (2, 2), [c.signature.name for c in calls]
