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

from lingpipe.gpipe.choice import call_costs
from lingpipe.gpipe.planner import layer_times

# Stepping stops starting new candidates after this many seconds (the plain model and the best predicted one are
# always stepped): tracing a candidate's step costs more than its steps.
TRIAL_SECONDS = 30.0
MAX_CANDIDATES = 3  # the best predicted that fit, beside the plain model
# A configuration is taken over the plain model only when it stepped this much faster: nearer is the noise of a
# shared machine (best-of-3 steps here swing a few percent), and the plain model costs nothing to run.
MIN_GAIN = 0.05


Stepper = call_costs.Stepper  # A real pipeline's training step (call_costs.py measures with real pipelines).
StepSeconds = call_costs.StepSeconds
Seconds = call_costs.Seconds


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
