"""What a pipeline's cell calls cost on this machine beyond its layers' times, measured with a real
pipeline: the planner's step_time.Terms split_backward (with the model's own heaviest layer, since
how much splitting a backward costs depends on the layer) and per_action (with a dense stack: a call
costs the same whatever it runs). planner/step_time.py says how a step prediction uses them. Stepper is a real
pipeline's training step, which the choice also steps its best candidates with (step_trials.py)."""

import contextlib

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import weight_init
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe.planner import layer_times


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
