"""Measured training steps of a model's layers piped as the planner's best candidates and as the plain model.

A prediction adds layers timed alone (layer_times.py); inside a cell a layer can run slower or faster (a
batch-normalized network's cells, a micro-batch too small for the machine), and a choice predicted faster than
the plain model that runs slower is the costliest mistake --pipeline=auto can make. So the choice is stepped: the
plain model (K=1, M=1, nothing re-computed) and the best predicted candidates that fit run a few real steps each,
on a sample batch, and the fastest measured is taken.
"""

import time
from typing import List, NamedTuple, Optional, Tuple

import tensorflow as tf

from lingpipe.core import context
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe.planner import layer_times

# Stepping stops starting new candidates after this many seconds (the plain model and the best predicted one are
# always stepped): tracing a candidate's step costs more than its steps.
TRIAL_SECONDS = 30.0
MAX_CANDIDATES = 3  # the best predicted that fit, beside the plain model
# A configuration is taken over the plain model only when it stepped this much faster: nearer is the noise of a
# shared machine (best-of-3 steps here swing a few percent), and the plain model costs nothing to run.
MIN_GAIN = 0.05


def _Loss(outputs, unused_targets):
  flat = [t for t in tf.nest.flatten(outputs) if t.dtype.is_floating]
  loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(t, tf.float32))) for t in flat])
  return loss, {'loss': (loss, 1.0)}


def Stepper(layer_params, inputs, fields, devices=None, batch_dim=0):
  """A function that runs one training step (forward, loss, backward) of `layer_params` piped as `fields`
  (PipeliningLayer values: num_splits, num_micro_batches, remat, schedule, balance, virtual_stages) on `devices`
  (None: the current mesh), on `inputs`; traced at its first call."""
  pipe = pipelining_layer.PipeliningLayer.Params().Set(
      name='trial', layers=[p.Copy() for p in layer_params], batch_dim=batch_dim, **fields)
  if devices is not None:
    pipe.devices = list(devices[:fields.get('num_splits', 1)])
  pipe = pipe.Instantiate()
  batch = tf.shape(tf.nest.flatten(inputs)[0])[batch_dim]
  targets = tf.zeros([batch])

  @tf.function(autograph=False)
  def Step():
    with tf.GradientTape() as tape, context.Training(True):
      loss, _ = pipe.FPropWithLoss(inputs, targets, _Loss)
    return tape.gradient(loss, pipe.trainable_variables)
  return Step


def StepSeconds(layer_params, inputs, fields, devices=None, batch_dim=0, repeats=3):
  """Best-of-`repeats` seconds of a Stepper's step, after one untimed step."""
  return Seconds(Stepper(layer_params, inputs, fields, devices, batch_dim), repeats)


def Seconds(step, repeats=3):
  """The best of `repeats` timed calls of step(), after one untimed call."""
  return layer_times.Best(step, repeats)


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
