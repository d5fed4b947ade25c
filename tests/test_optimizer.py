"""Optimizers against NumPy references, and the learning-rate schedules."""

import math

import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import lr_schedule
from lingpipe.core import optimizer


def _Run(opt_params, grads, lr=0.1, w0=1.0):
  var = tf.Variable([w0, -w0], name='layer/w')
  opt = opt_params.Instantiate().Build([var])
  for g in grads:
    opt.Apply([tf.constant([g, g])], [var], lr)
  return var.numpy()[0]


def test_sgd_and_momentum():
  assert _Run(optimizer.SGD.Params(), [1.0, 2.0]) == pytest.approx(1.0 - 0.1 * 3)
  # m1 = 1, m2 = 0.9 + 2 = 2.9; w = 1 - 0.1 * (1 + 2.9)
  assert _Run(optimizer.SGD.Params().Set(momentum=0.9), [1.0, 2.0]) == pytest.approx(1.0 - 0.39)
  # Nesterov: steps g + 0.9 m: 1 + 0.9, 2 + 0.9 * 2.9
  assert _Run(optimizer.SGD.Params().Set(momentum=0.9, nesterov=True), [1.0, 2.0]) == pytest.approx(
      1.0 - 0.1 * (1.9 + 2 + 0.9 * 2.9))


def _NumpyAdam(grads, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, w=1.0):
  m = v = 0.0
  for t, g in enumerate(grads, 1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    w -= lr * ((m / (1 - b1**t)) / (math.sqrt(v / (1 - b2**t)) + eps) + wd * w)
  return w


def test_adam_and_adamw():
  grads = [0.5, -1.0, 2.0]
  assert _Run(optimizer.Adam.Params(), grads) == pytest.approx(_NumpyAdam(grads, 0.1), rel=1e-5)
  assert _Run(optimizer.AdamW(0.01), grads) == pytest.approx(_NumpyAdam(grads, 0.1, wd=0.01), rel=1e-5)


def test_rmsprop():
  ms, w = 0.0, 1.0
  for g in [1.0, 3.0]:
    ms = 0.9 * ms + 0.1 * g * g
    w -= 0.1 * g / math.sqrt(ms + 1e-10)
  assert _Run(optimizer.RMSProp.Params(), [1.0, 3.0]) == pytest.approx(w, rel=1e-5)


def test_apply_without_build_raises():
  opt = optimizer.SGD.Params().Instantiate()
  with pytest.raises(errors.ConfigError, match='call Build'):
    opt.Apply([tf.constant(1.0)], [tf.Variable(1.0, name='x')], 0.1)


def _Values(params, steps):
  schedule = params.Instantiate()
  return [float(schedule.Value(tf.constant(s, tf.int64))) for s in steps]


def test_schedules():
  assert _Values(lr_schedule.Constant.Params().Set(value=0.5), [0, 100]) == [0.5, 0.5]
  t = _Values(lr_schedule.TransformerSchedule.Params().Set(warmup_steps=10, model_dim=16), [0, 9, 99])
  assert t[0] == pytest.approx(0.25 * 1 * 10**-1.5) and t[1] == pytest.approx(0.25 * 10**-0.5)
  assert t[2] == pytest.approx(0.25 * 100**-0.5)
  c = _Values(lr_schedule.CosineSchedule.Params().Set(warmup_steps=10, total_steps=110, min_ratio=0.1),
              [0, 9, 10, 60, 110, 500])
  assert c[0] == pytest.approx(0.1) and c[1] == pytest.approx(1.0) and c[2] == pytest.approx(1.0)
  assert c[3] == pytest.approx(0.55) and c[4] == pytest.approx(0.1) and c[5] == pytest.approx(0.1)
  e = _Values(lr_schedule.ExponentialSchedule.Params().Set(warmup_steps=4, decay_steps=10, decay_rate=0.5,
                                                            min_ratio=0.2), [0, 3, 4, 9, 10, 25, 1000])
  assert e == pytest.approx([0.25, 1.0, 1.0, 1.0, 0.5, 0.25, 0.2])  # The reference AmoebaNet's, with a floor.
  pw = _Values(lr_schedule.PiecewiseConstant.Params().Set(boundaries=[10, 20], values=[1.0, 0.1, 0.01]),
               [0, 9, 10, 19, 20, 1000])
  assert pw == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.01, 0.01])


def test_schedule_errors():
  with pytest.raises(errors.ConfigError, match='2 boundaries need 3 values, got 2'):
    lr_schedule.PiecewiseConstant.Params().Set(boundaries=[1, 2], values=[1.0, 2.0]).Instantiate()
  with pytest.raises(errors.ConfigError, match='must exceed warmup_steps'):
    lr_schedule.CosineSchedule.Params().Set(warmup_steps=10, total_steps=10).Instantiate()
