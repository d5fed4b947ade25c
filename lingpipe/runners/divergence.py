"""Weights that diverged: a training step whose loss or gradient is not finite stops the run, and the checkpoint
holding the weights it started from is set aside (logdir/set_aside.py), so nothing resumes from, evaluates or
exports them; weights that are not finite are never saved, evaluated or exported."""

import os

import numpy as np
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.logdir import checkpointer
from lingpipe.logdir import set_aside

_ADVICE = 'lower task.train.learning_rate or set task.train.clip_gradient_norm_to_value'


def Stopped(train_dir, step, what, advice=_ADVICE):
  """The error to raise when the step after `step` (the number of steps applied) gave a non-finite loss or
  gradient, described by `what` (a sentence); sets aside ckpt-<step>, which holds the weights that gave it."""
  folder, good = set_aside.SetAsideDiverged(train_dir, step)
  parts = [what]
  if folder:
    parts.append('The weights it started from are those of ckpt-%d: moved to %s (kept, not deleted) so that no '
                 'run resumes from, evaluates or exports them.' % (step, folder))
  if good:
    parts.append('The last good checkpoint is %s (step %s), where a rerun trains on: %s first.' % (
        good, checkpointer.Step(good), advice))
  else:
    parts.append('No good checkpoint was written, so a rerun starts from step 0: %s first.' % advice)
  return errors.NonFiniteLossError(' '.join(parts))


@tf.function(autograph=False)
def _FiniteFlags(variables):
  flags = []
  for v in variables:
    with tf.device(v.device):  # Where the variable lives (a worker's): only a bool crosses to this process.
      flags.append(tf.reduce_all(tf.math.is_finite(v)))
  return tf.stack(flags)


def NonFinite(variables):
  """The names of the floating-point `variables` holding a NaN or Inf, in their order."""
  floating = [v for v in variables if v.dtype.is_floating]
  if not floating:
    return []
  flags = _FiniteFlags(floating).numpy()
  return [v.name for v, ok in zip(floating, flags) if not ok]


def CheckFinite(variables, what, fix):
  """Raises NonFiniteLossError naming the first non-finite variable of `variables` in the sentence
  '<what> has <n> variable(s) that are not finite (<name>...): <fix>'."""
  bad = NonFinite(variables)
  if bad:
    raise errors.NonFiniteLossError('%s has %d variable%s that %s not finite (%s%s): %s' % (
        what, len(bad), '' if len(bad) == 1 else 's', 'is' if len(bad) == 1 else 'are', bad[0],
        ', ...' if len(bad) > 1 else '', fix))


def NonFiniteMetrics(metrics):
  """The names of `metrics` ({name: float}) that are NaN or Inf, sorted."""
  return sorted(name for name, value in metrics.items() if not np.isfinite(value))


def SetAsideNote(path):
  """Why eval, decode and export refuse checkpoint `path` ('' if they need not): it lies in a folder training set
  aside."""
  folder = set_aside.SetAsideFolder(path)
  if folder is None:
    return ''
  why = ('its weights gave a non-finite loss' if folder == set_aside.DIVERGED_DIR
         else 'its files did not restore')
  return ('%s is in %s, where training set it aside (%s); pass a checkpoint of %s instead.' % (
      path, os.path.dirname(os.path.abspath(path)), why, os.path.dirname(os.path.dirname(os.path.abspath(path)))))
