"""phase_loop: what a looped phase sends between devices on every iteration, seen in the step's partition graphs."""

import tensorflow as tf
from tensorflow.python.eager import context as eager_context  # pylint: disable=g-direct-tensorflow-import

from lingpipe.core import context
from tests import pipeline_test_util as util


def _PartitionGraphs(pipe, x):
  """The partition graphs (one per device) of a training step of `pipe` on `x`, as the runtime ran them."""

  @tf.function(autograph=False)
  def Step(x):
    with tf.GradientTape() as tape:
      with context.Training(True):
        loss = tf.reduce_sum(pipe.FProp(x))
    return tape.gradient(loss, pipe.trainable_variables)

  eager_context.enable_run_metadata()
  eager_context.context().enable_graph_collection()
  try:
    tf.nest.map_structure(lambda t: t.numpy(), Step(x))
    metadata = eager_context.export_run_metadata()
  finally:
    eager_context.context().disable_graph_collection()
    eager_context.disable_run_metadata()
  return [graph for function in metadata.function_graphs for graph in function.partition_graphs]


def test_each_device_counts_the_loop_iterations_itself():
  """Inside a loop every device needs the iteration's micro-batch index. Read from one loop counter, it crossed to
  the other device on every iteration (an int32 transfer beside the loop condition and the hand-offs; across
  processes an RPC); each device now carries its own count (phase_loop.Counters)."""
  _, pipe = util.Pair(util.Tanh(4), num_splits=2, num_micro_batches=8, remat='never')
  graphs = _PartitionGraphs(pipe, tf.random.stateless_normal([32, 8], [1, 2]))
  sends = [n for g in graphs for n in g.node if n.op == '_Send' and n.name.startswith('while')]
  in_loop = {(tf.dtypes.as_dtype(n.attr['T'].type).name, n.name.split('/')[1]) for n in sends}
  # The test sees the loops' transfers: the condition goes to the other device, and so do the activations.
  assert ('bool', 'LoopCond') in in_loop and any(d == 'float32' for d, _ in in_loop), sorted(in_loop)
  assert not [n.name for n in sends if n.attr['T'].type == tf.int32.as_datatype_enum], sorted(in_loop)
