"""What --pipeline=auto measures on this machine: the costs a prediction adds up, and real training steps of the
best predicted candidates beside the plain model.

MeasureCosts times the model's layers alone (layer_times.py) at the batch's and the micro-batches' sizes, and this
machine's costs beyond them (planner/step_time.py's Terms): the devices' concurrency, what splitting a backward costs
(SplitBackward, with the model's heaviest layer), what a cell call costs (PerAction, with a dense stack) and what a
hand-off between two devices costs (Handoff), the last three with real pipelines and copies.

Inside a cell a layer can run slower or faster than alone (a batch-normalized network's cells, a micro-batch too small
for the machine), and a choice predicted faster than the plain model that runs slower is the costliest mistake
--pipeline=auto can make. So the choice is stepped (Run): the plain model (K=1, M=1, nothing re-computed) and the best
predicted candidates that fit run a few real steps each, on a sample batch, and the fastest measured is taken.
"""

import contextlib
import threading
import time
from typing import List, NamedTuple, Optional, Tuple

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import weight_init
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe.planner import layer_times
from lingpipe.gpipe.planner import step_time

# Stepping stops starting new candidates after this many seconds (the plain model and the best predicted one are
# always stepped): tracing a candidate's step costs more than its steps.
TRIAL_SECONDS = 30.0
MAX_CANDIDATES = 3  # the best predicted that fit, beside the plain model
# A configuration is taken over the plain model only when it stepped this much faster: nearer is the noise of a
# shared machine (best-of-3 steps here swing a few percent), and the plain model costs nothing to run.
MIN_GAIN = 0.05


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


def _Loss(outputs, unused_targets):
  flat = [t for t in tf.nest.flatten(outputs) if t.dtype.is_floating]
  loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32))) for t in flat])
  return loss, {'loss': (loss, 1.0)}


def Stepper(layer_params, inputs, fields, devices=None, batch_dim=0):
  """A function that runs one training step (forward, loss, backward) of `layer_params` piped as `fields`
  (PipeliningLayer values: num_splits, num_micro_batches, remat, schedule, balance, virtual_stages) on `devices`
  (None: the current mesh), on `inputs`; traced at its first call."""
  return StepOf(TrialPipe(layer_params, fields, devices, batch_dim), inputs, devices, batch_dim)


def TrialPipe(layer_params, fields, devices=None, batch_dim=0):
  """The PipeliningLayer of `layer_params` piped as `fields` on `devices` (None: the current mesh) that Stepper
  steps."""
  pipe = pipelining_layer.PipeliningLayer.Params().Set(
      name='trial', layers=[p.Copy() for p in layer_params], batch_dim=batch_dim, **fields)
  if devices is not None:
    pipe.devices = list(devices[:fields.get('num_splits', 1)])
  return pipe.Instantiate()


def StepOf(pipe, inputs, devices=None, batch_dim=0):
  """Stepper's step of a TrialPipe: a scalar read from every gradient on its own device (on workers no gradient
  travels to this process, as in the trainer, which applies them there)."""
  batch = tf.shape(tf.nest.flatten(inputs)[0])[batch_dim]
  targets = tf.zeros([batch])

  @tf.function(autograph=False)
  def Step():
    with tf.device(devices[0]) if devices else contextlib.nullcontext():  # As the trainer's mesh.Placement().
      with tf.GradientTape() as tape, context.Training(True):
        loss, _ = pipe.FPropWithLoss(inputs, targets, _Loss)
      sums = []
      for g, v in zip(tape.gradient(loss, pipe.trainable_variables), pipe.trainable_variables):
        if g is not None:
          with tf.device(v.device):
            sums.append(tf.reduce_sum(tf.cast(g.values if isinstance(g, tf.IndexedSlices) else g, tf.float32)))
      return tf.add_n(sums) if sums else loss
  return Step


def StepSeconds(layer_params, inputs, fields, devices=None, batch_dim=0, repeats=3):
  """Best-of-`repeats` seconds of a Stepper's step, after one untimed step."""
  return Seconds(Stepper(layer_params, inputs, fields, devices, batch_dim), repeats)


def Seconds(step, repeats=3):
  """The best of `repeats` timed calls of step(), after one untimed call."""
  return layer_times.Best(step, repeats)


def _StepSeconds(layers, inputs, num_micro, schedule, batch_dim=0, repeats=5):
  """Best-of-`repeats` seconds of a training step of a one-cell pipeline of `layers` on `inputs`."""
  return StepSeconds(layers, inputs, dict(num_splits=1, num_micro_batches=num_micro, remat='never',
                                          schedule=schedule), batch_dim=batch_dim, repeats=repeats)


MIN_BACKWARD_SHARE = 1 / 3  # The least share of a step SplitBackward takes a backward's to be.


def SplitBackward(layer, batch_size, times, batch_dim=0):
  """What splitting a backward into BACKWARD and WEIGHT (zero bubble) adds to it, as a fraction of
  the backward: one cell of `layer` (a layer_times.Layer) stepped by zero bubble and by 1F1B at M=1.
  `times`: the model's layer_times.Times at `batch_size`, whose entry for the layer gives the
  backward's share of a step."""
  inputs = layer_times.SampleInputs(layer.inputs)
  one = _StepSeconds([layer.params], inputs, 1, '1f1b', batch_dim)
  split = _StepSeconds([layer.params], inputs, 1, 'zero_bubble', batch_dim)
  forward, backward = times.forward[layer.index], times.backward[layer.index]
  # The steps' difference is the backward's extra; the backward is its share of the 1F1B step. A
  # backward computes about two products per forward one, so a share under a third is a timing's
  # noise (a backward timed at 0 would make the split cost without bound).
  share = max(backward / (forward + backward) if forward + backward > 0 else 0.0, MIN_BACKWARD_SHARE)
  return max(0.0, (split - one) / (one * share))


def PerAction(width=512, layers=4, batch=512):
  """Seconds each cell call costs beyond the layers' times: a dense stack's 1F1B step at M=8 over
  M=1, less the layers' own times at each micro-batch size, per extra call."""
  stack = [_Dense.Params().Set(name='l%d' % i, dim=width) for i in range(layers)]
  inputs = tf.random.normal([batch, width], seed=2)
  one, eight = (_StepSeconds(stack, inputs, m, '1f1b') for m in (1, 8))
  built = {}
  whole = layer_times.Measure(stack, [batch, width], batch, built=built)
  micro = layer_times.Measure(stack, [batch, width], batch // 8, built=built)
  work = lambda t, m: m * (sum(t.forward) + sum(t.backward))
  # The calls one M=1 step and one M=8 step make: a forward and a backward per micro-batch.
  return max(0.0, ((eight - work(micro, 8)) - (one - work(whole, 1))) / (2 * 8 - 2))


HANDOFF_BYTES = (2**16, 2**22)  # The two tensor sizes a hand-off is timed at: its fixed cost and its cost a byte.
_COPIES = 8  # Hand-offs per timed call, so that the call's own cost is spread over them.


def Handoff(devices, sizes=HANDOFF_BYTES, repeats=5):
  """(seconds, seconds a byte) a hand-off of a tensor from devices[0] to devices[1] costs beyond the same work on
  devices[0] alone: the line through its cost at the two `sizes`. Between worker processes TensorFlow serializes
  the tensor and sends it through gRPC; between logical devices of one process it costs about nothing. (0, 0) with
  fewer than two devices."""
  if len(devices) < 2:
    return 0.0, 0.0
  per_copy = []
  for size in sizes:
    with tf.device(devices[0]):
      source = tf.Variable(tf.zeros([max(size // 4, 1)]), trainable=False)
    seconds = []
    for receiver in (devices[0], devices[1]):

      @tf.function(autograph=False)
      def Copies(receiver=receiver, source=source):
        firsts = []
        for i in range(_COPIES):
          with tf.device(devices[0]):
            fresh = source + float(i)  # A new tensor each time, as a cell's output is.
          with tf.device(receiver):
            firsts.append(fresh[0])  # The whole tensor travels; the receiver computes next to nothing.
        return tf.add_n(firsts)

      seconds.append(Seconds(lambda f=Copies: f().numpy(), repeats))
    per_copy.append(max(0.0, (seconds[1] - seconds[0]) / _COPIES))
  per_byte = max(0.0, (per_copy[1] - per_copy[0]) / (sizes[1] - sizes[0]))
  return max(0.0, per_copy[0] - per_byte * sizes[0]), per_byte


PLAIN_LABEL = 'plain (K=1, M=1, remat=never)'


class Trial(NamedTuple):
  label: str  # PLAIN_LABEL, or the candidate's description
  option: Optional[object]  # the auto_config.Option stepped; None for the plain model when it is no option
  seconds: Optional[float]  # None: the step failed (its error in `error`)
  error: str = ''


def Run(candidates: List[Tuple[str, object, dict]], layer_params, input_shapes, batch_size, dtype, devices,
        batch_dim=0, input_dtypes=None, budget_seconds=TRIAL_SECONDS, log=None) -> List[Trial]:
  """Steps each (label, option, fields) of `candidates` in order, the first two always, the others while
  `budget_seconds` last; a candidate that fails to step is reported, not raised."""
  inputs = layer_times.SampleBatch(input_shapes, batch_size, dtype, input_dtypes, batch_dim)
  layers = [p.Copy().Set(fprop_dtype=p.fprop_dtype or tf.as_dtype(dtype)) for p in layer_params]
  start, trials, plain = time.perf_counter(), [], None
  for i, (label, option, fields) in enumerate(candidates):
    if i >= 2 and time.perf_counter() - start > budget_seconds:
      break
    try:
      step = Stepper(layers, inputs, fields, devices, batch_dim)
      trials.append(Trial(label, option, Seconds(step)))
      if label == PLAIN_LABEL:  # Kept, to be stepped again at the end: a process's first trial can run slower.
        plain = step
      del step  # A candidate's pipeline goes before the next is built.
    except (tf.errors.ResourceExhaustedError, MemoryError) as e:
      trials.append(Trial(label, option, None, 'out of memory: %s' % str(e).strip().splitlines()[0][:120]))
    if log:
      log('stepped %s: %s' % (label, '%.3f s' % trials[-1].seconds if trials[-1].seconds else trials[-1].error))
  if plain is not None and len(trials) > 1 and trials[0].seconds is not None:
    trials[0] = trials[0]._replace(seconds=min(trials[0].seconds, Seconds(plain)))
  return trials


def MeasureConcurrency(run, devices, repeats=3):
  """[K-1]: the throughput of the first K of `devices` (names) each calling run(device) at once,
  from its own thread as the pipeline's executor does, in one device's."""

  def Together(count):
    threads = [threading.Thread(target=run, args=(d,)) for d in devices[:count]]
    for t in threads:
      t.start()
    for t in threads:
      t.join()

  one = layer_times.Best(lambda: run(devices[0]), repeats)
  return (1.0,) + tuple(k * one / layer_times.Best(lambda k=k: Together(k), repeats)
                        for k in range(2, len(devices) + 1))


def MeasureTerms(run, devices, call_terms, handoff=lambda: (0.0, 0.0)) -> step_time.Terms:
  """This machine's step_time.Terms for pipelines on `devices` (device names, at least one), the
  devices' concurrency measured with run(device), a unit of the model's own work
  (layer_times.RunsOnDevice of layer_times.Heaviest), call_terms() the (split_backward,
  per_action) a real pipeline measures (SplitBackward and PerAction), and handoff() the
  (seconds, seconds a byte) of a hand-off between two of the devices (Handoff)."""
  split, per_action = call_terms()
  fixed, per_byte = handoff()
  return step_time.Terms(MeasureConcurrency(run, devices), split, per_action, fixed, per_byte)


# Seconds of layer timing after the three anchor sizes during which the other micro-batch sizes are
# timed too rather than interpolated: a dense stack's bfloat16 kernels here are not linear in rows,
# and every size of it takes a few seconds; AmoebaNet-D's anchors alone take most of its minute.
EXACT_SIZES_SECONDS = 15.0


class Costs(NamedTuple):
  """What a prediction adds up, measured on this machine."""
  times: object  # times(size): the layers' layer_times.Times at a batch of `size`
  terms: step_time.Terms  # the costs beyond the layers' own times
  plain_seconds: float  # the plain model's step: the whole batch's layer times and two calls


def MeasureCosts(layer_params, input_shapes, batch, micro_batches, devices, dtype='float32', batch_dim=0, log=None,
                 input_dtypes=None, split_backward=True) -> Costs:
  """The layers timed on devices[0] at the whole `batch`, the smallest micro-batch and one between (of
  `micro_batches`, the M the choice may take), then every other size while that lasts under EXACT_SIZES_SECONDS
  (linear between timed sizes for the rest; each size is traced apart, as a cell is); and the Terms of `devices`:
  their concurrency with the model's heaviest layer at a micro-batch's size, a split backward's cost (where
  `split_backward`: zero bubble may be chosen), a cell call's and a hand-off's."""
  built, measured, took = {}, {}, {}  # each distinct layer built once, and traced once a size; seconds a size took
  anchors = sorted({batch, batch // micro_batches[-1], batch // micro_batches[len(micro_batches) // 2]})

  def MeasureSize(size):
    start = time.perf_counter()
    with tf.device(devices[0]):
      measured[size] = layer_times.Measure(layer_params, input_shapes, size, dtype=dtype, batch_dim=batch_dim,
                                           log=log, built=built, input_dtypes=input_dtypes)
    took[size] = time.perf_counter() - start

  def Times(size):
    if size not in measured:
      timed = sorted(measured)
      if not timed or size < timed[0] or size > timed[-1]:
        MeasureSize(size)
      else:
        lo, hi = max(a for a in timed if a < size), min(a for a in timed if a > size)
        return layer_times.Interpolate(measured[lo], measured[hi], size)
    return measured[size]

  for size in anchors:
    MeasureSize(size)
  spent = 0.0
  for size in sorted({batch // m for m in micro_batches} - set(anchors), reverse=True):
    expected = took[min(a for a in took if a > size)]  # a larger size's timing took at least as long
    if spent + expected > EXACT_SIZES_SECONDS:
      break
    MeasureSize(size)
    spent += took[size]
  size = anchors[len(anchors) // 2]
  times_at_size = Times(size)
  heaviest = layer_times.Heaviest(layer_params, input_shapes, times_at_size, dtype, batch_dim)
  unit = layer_times.RunsOnDevice(heaviest, dtype, batch_dim, built)

  def CallTerms():
    with tf.device(devices[0]):  # Where the layers were timed: on a cluster, the first worker, not this process.
      return (SplitBackward(heaviest, size, times_at_size, batch_dim) if split_backward else 0.0, PerAction())

  terms = MeasureTerms(unit, devices, CallTerms, lambda: Handoff(devices))
  whole = Times(batch)
  return Costs(Times, terms, sum(whole.forward) + sum(whole.backward) + 2 * terms.per_action)
