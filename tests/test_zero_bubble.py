"""schedule='zero_bubble': its plan, the split backward (input gradients now, weight gradients deferred), and
transparency against the plain model across K, M and remat policies (with batch norm, dropout, NestedMaps)."""

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import schedule
from lingpipe.gpipe.engine import split_backward
from lingpipe.layers import batch_norm
from lingpipe.layers import dropout
from lingpipe.layers import linear
import pipeline_test_util as util
from test_one_f_one_b import _LossAndGrads


def test_the_plan_matches_the_docstring_and_fills_one_f_one_bs_bubble():
  plan = schedule.MakePlan('zero_bubble', 4, 2, 'never')
  assert plan.Diagram().splitlines()[1:] == [
      'dev 0  F0  F1  .   B0  W0  B1  F2  W1  F3  B2  W2  B3  W3',
      'dev 1  .   F0  B0  F1  B1  W0  W1  F2  B2  F3  B3  W2  W3']
  for k in range(1, 6):
    for m in range(1, 13):
      plan = schedule.MakePlan('zero_bubble', m, k, 'always')  # Check() runs inside.
      assert plan.splits_backward
      bubble, one_f_one_b = schedule.Bubble(plan), schedule.Bubble(schedule.MakePlan('1f1b', m, k, 'always'))
      assert bubble <= one_f_one_b + 1e-9, (k, m)
      if k == 2 and m % 2 == 0:  # Odd M waits once more: K micro-batches in flight at most.
        assert bubble == pytest.approx((k - 1) / (3 * m + k - 1)), m
      for d in range(k):  # Activations live from a forward to its W: at most K micro-batches, 1F1B's peak.
        in_flight, most = 0, 0
        for a in plan.DeviceActions(d):
          in_flight += {'forward': 1, 'weight': -1}.get(a.kind, 0)
          most = max(most, in_flight)
        assert most <= k
  assert schedule.Bubble(schedule.MakePlan('zero_bubble', 8, 4, 'never')) < 0.7 * schedule.Bubble(
      schedule.MakePlan('1f1b', 8, 4, 'never'))
  assert not schedule.MakePlan('zero_bubble', 4, 2, None).splits_backward  # Evaluation: forwards only.


def test_check_rejects_a_weight_action_before_its_backward():
  plan = schedule.MakePlan('zero_bubble', 2, 1, 'never')
  actions = [a for tick in plan.phases[0].ticks for a in tick]
  weight = next(a for a in actions if a.kind == plan_lib.WEIGHT)
  rest = [a for a in actions if a is not weight]
  broken = plan._replace(phases=(plan_lib.Phase(plan_lib.STEP, tuple((a,) for a in [weight] + rest)),))
  with pytest.raises(errors.ConfigError, match='weight gradients .* run before its backward'):
    plan_lib.Check(broken)


def _Dense(x, params):
  for w in params:
    x = tf.tanh(tf.matmul(x, w))
  return x, None


def test_the_weight_gradients_are_deferred_and_exact():
  rng = np.random.RandomState(0)
  weights = [tf.constant(rng.normal(size=(4, 4)), tf.float32) for _ in range(3)]
  x = tf.constant(rng.normal(size=(2, 4)), tf.float32)
  dy = tf.constant(rng.normal(size=(2, 4)), tf.float32)

  @tf.function(autograph=False)
  def Split(x, weights, shared):
    forward = (lambda x, p: _Dense(x, [p[0], p[1], p[0]])) if shared else _Dense
    _, _, recorded = split_backward.Record(forward, x, weights)
    input_grads, pending = split_backward.InputGrads(recorded, dy)
    deferred = [r is not None for r in pending.reads]
    return input_grads, split_backward.WeightGrads(pending), deferred

  @tf.function(autograph=False)
  def Whole(x, weights, shared):
    with tf.GradientTape() as tape:
      tape.watch([x] + weights)
      y, _ = _Dense(x, [weights[0], weights[1], weights[0]] if shared else weights)
    return tape.gradient(y, [x] + weights, output_gradients=dy)

  for shared in (False, True):
    input_grads, weight_grads, deferred = Split(x, weights, shared)
    expected = Whole(x, weights, shared)
    np.testing.assert_allclose(input_grads[0], expected[0], rtol=1e-5, atol=1e-6)
    for g, e in zip(weight_grads, expected[1:]):
      np.testing.assert_allclose(g, 0 * g if e is None else e, rtol=1e-5, atol=1e-6)
    # Each weight read by one MatMul is deferred; one read twice comes from the input sweep; an unread one is 0.
    assert [bool(d) for d in deferred] == ([False, True, False] if shared else [True, True, True])


def test_eager_execution_is_a_clear_error():
  _, pipe = util.Pair(util.Tanh(2), num_splits=2, num_micro_batches=2, schedule='zero_bubble')
  with context.Training(True), pytest.raises(errors.ConfigError, match='needs a graph.*tf.function'):
    pipe.FPropWithLoss(tf.ones([4, 8]), tf.zeros([4, 8]), lambda out, t: (tf.reduce_mean(out), {}))


@pytest.mark.parametrize('k,m,remat', [(2, 4, 'always'), (2, 4, 'never'), (3, 5, 'except_last'), (4, 2, 'always'),
                                       pytest.param(4, 8, 'never', marks=pytest.mark.slow), (1, 3, 'never'),
                                       (2, 1, 'always')])
def test_zero_bubble_matches_the_plain_model(k, m, remat):
  plain, pipe = util.Pair(util.Tanh(12, dim=8), num_splits=k, num_micro_batches=m, remat=remat,
                          schedule='zero_bubble')
  rng = np.random.RandomState(k + m)
  x = tf.constant(rng.normal(size=(m * 3, 8)), tf.float32)
  targets = tf.constant(rng.normal(size=(m * 3, 8)), tf.float32)
  util.AssertClose(_LossAndGrads(plain, x, targets, False), _LossAndGrads(pipe, x, targets, True))


@pytest.mark.parametrize('remat', ['always', 'never'])
@pytest.mark.slow
def test_batch_norm_and_dropout_train_as_under_one_f_one_b(remat):
  """The same moments and masks as 1F1B (which test_one_f_one_b.py checks against the plain model)."""
  layers = [linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8, activation='tanh'),  # Else its bias
            batch_norm.BatchNormLayer.Params().Set(dim=8, decay=0.5),
            dropout.DropoutLayer.Params().Set(keep_prob=0.7, deterministic=True),
            linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8, activation='tanh'),
            linear.ProjectionLayer.Params().Set(input_dim=8, output_dim=8)]
  x = tf.constant(np.random.RandomState(1).normal(size=(16, 8)), tf.float32)
  targets = tf.constant(np.random.RandomState(2).normal(size=(16, 8)), tf.float32)
  results = []
  for name in ('1f1b', 'zero_bubble'):
    _, pipe = util.Pair(layers, num_splits=2, num_micro_batches=4, remat=remat, schedule=name)
    results.append((_LossAndGrads(pipe, x, targets, True), pipe.units[1].moving_mean.numpy(),
                    pipe.units[1].moving_variance.numpy()))
  (one_f, mean, variance), (zero, zero_mean, zero_variance) = results
  util.AssertClose(one_f, zero)
  np.testing.assert_allclose(zero_mean, mean, rtol=1e-6)
  np.testing.assert_allclose(zero_variance, variance, rtol=1e-6)
  assert not np.allclose(mean, 0)  # The averages moved.
