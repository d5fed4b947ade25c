"""The planner's step time of a pipeline configuration, from measured layer times and this machine's own costs.

Each action of the schedule's plan takes its cell's measured layer times at the micro-batch's size: a forward its
forwards, a backward its backwards plus the forward again where the plan re-computes (a device that runs a
micro-batch's backward right after its forward keeps the activations instead), and a split backward its
backwards times this machine's measured cost of splitting. Every action also pays a fixed cost per call. The plan
is run by schedule.Simulate, and the devices together cannot go faster than their measured concurrency: logical
CPU devices share the machine's cores. What is measured (`Measure`, each time the trainer chooses, on its own
devices):
  concurrency      the throughput of K devices each running the same work at once, over one device's
  split_backward   a zero-bubble step (backward split in two) over a 1F1B step of the same model, less one
  per_action       seconds a cell's forward or backward costs beyond its layers' times
"""

import threading
from typing import NamedTuple, Sequence, Tuple

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import weight_init
from lingpipe.gpipe import layer_times
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule as schedule_lib


class Terms(NamedTuple):
  """This machine's costs beyond the layers' own times."""
  concurrency: Tuple[float, ...]  # [K-1]: throughput of K devices at once, in one device's
  split_backward: float = 0.0  # extra fraction of a backward when split into BACKWARD and WEIGHT
  per_action: float = 0.0  # seconds a cell call costs

  def Concurrency(self, num_devices):
    if num_devices <= len(self.concurrency):
      return self.concurrency[num_devices - 1]
    return float(num_devices)


IDEAL = Terms(concurrency=())  # devices that run in parallel at full speed; nothing else costs


def Predict(plan, forward, backward, terms=IDEAL) -> float:
  """Seconds of a training step of `plan`, given each cell's measured forward and backward seconds at one
  micro-batch (`forward[c]`, `backward[c]`: its layers' times added up)."""
  split = 1.0 + terms.split_backward if plan.splits_backward else 1.0

  def Cost(a):
    k = a.cell
    if a.kind == plan_lib.FORWARD:
      cost = forward[k]
    elif a.kind == plan_lib.BACKWARD:
      cost = (backward[k] * split / 2 if plan.splits_backward else backward[k]) + (
          forward[k] if a.recompute else 0.0)
    else:  # WEIGHT
      cost = backward[k] * split / 2
    return cost + terms.per_action

  length, idle = schedule_lib.Simulate(plan, action_cost=Cost)
  busy = (1.0 - idle) * plan.num_devices * length  # every device's time, added up
  return max(length, busy / terms.Concurrency(plan.num_devices))


def CellTimes(counts: Sequence[int], forward, backward) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
  """(forward, backward) of each cell of `counts` layers: the layers' `forward` and `backward` added up."""
  cells_forward, cells_backward, lo = [], [], 0
  for c in counts:
    cells_forward.append(sum(forward[lo:lo + c]))
    cells_backward.append(sum(backward[lo:lo + c]))
    lo += c
  return tuple(cells_forward), tuple(cells_backward)


def MeasureConcurrency(run, devices, repeats=3):
  """[K-1]: the throughput of the first K of `devices` (names) each calling run(device) at once, from its own
  thread as the pipeline's executor does, in one device's."""

  def Together(count):
    threads = [threading.Thread(target=run, args=(d,)) for d in devices[:count]]
    for t in threads:
      t.start()
    for t in threads:
      t.join()

  one = layer_times.Best(lambda: run(devices[0]), repeats)
  return (1.0,) + tuple(k * one / layer_times.Best(lambda k=k: Together(k), repeats)
                        for k in range(2, len(devices) + 1))


class _Dense(base_layer.BaseLayer):
  """relu(x W): the layer the call terms are measured with (gpipe builds on core alone, not on lingpipe/layers)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('dim', 0, 'Depth of the input and output.')
    return p

  def __init__(self, params):
    super().__init__(params)
    self.CreateVariable('w', weight_init.WeightParams([params.dim, params.dim]))

  def FProp(self, inputs):
    return tf.nn.relu(tf.matmul(self.ToFProp(inputs), self.theta.w))

  @classmethod
  def FPropMeta(cls, params, input_shape):
    input_shape = tf.TensorShape(input_shape)
    return base_layer.Meta(input_shape, 2 * input_shape[0] * params.dim * params.dim)


def MeasureCallTerms(width=512, layers=4, batch=512):
  """(split_backward, per_action) measured with a real pipeline of a dense stack on one device: zero bubble's
  step over 1F1B's at M=1 less one, and what each extra cell call of 1F1B at M=8 costs beyond the layers' times at
  the micro-batch's size."""
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  stack = [_Dense.Params().Set(name='l%d' % i, dim=width) for i in range(layers)]
  inputs = tf.random.normal([batch, width], seed=2)

  def Step(num_micro, schedule):
    pipe = pipelining_layer.PipeliningLayer.Params().Set(
        name='speed_terms', layers=[p.Copy() for p in stack], num_splits=1, num_micro_batches=num_micro,
        remat='never', schedule=schedule).Instantiate()

    def Loss(outputs, unused_targets):
      loss = tf.reduce_mean(tf.square(outputs))
      return loss, {'loss': (loss, 1.0)}

    @tf.function(autograph=False)
    def Run():
      with tf.GradientTape() as tape, context.Training(True):
        loss, _ = pipe.FPropWithLoss(inputs, inputs, Loss)
      return tape.gradient(loss, pipe.trainable_variables)
    return layer_times.Best(Run, 5)

  one, zero_bubble, eight = Step(1, '1f1b'), Step(1, 'zero_bubble'), Step(8, '1f1b')
  built = {}
  whole = layer_times.Measure(stack, [batch, width], batch, built=built)
  micro = layer_times.Measure(stack, [batch, width], batch // 8, built=built)
  work = lambda t, m: m * (sum(t.forward) + sum(t.backward))
  # The calls one M=1 step and one M=8 step make: a forward and a backward per micro-batch.
  per_action = ((eight - work(micro, 8)) - (one - work(whole, 1))) / (2 * 8 - 2)
  return max(0.0, zero_bubble / one - 1.0), max(0.0, per_action)


def Measure(run, devices) -> Terms:
  """This machine's Terms for pipelines on `devices` (logical device names, at least one), the devices'
  concurrency measured with run(device), a unit of the model's own work (layer_times.HeaviestLayer)."""
  split, per_action = MeasureCallTerms()
  return Terms(MeasureConcurrency(run, devices), split, per_action)


def Describe(terms) -> str:
  """'2 devices run 1.73x one device's work; a split backward costs 9% more; a cell call 1.0 ms'."""
  parts = ['%d devices run %.2fx one device\'s work' % (k + 1, c) for k, c in enumerate(terms.concurrency) if k]
  parts.append('a split backward costs %.0f%% more' % (100 * terms.split_backward))
  parts.append('a cell call %.1f ms' % (1000 * terms.per_action))
  return '; '.join(parts)
