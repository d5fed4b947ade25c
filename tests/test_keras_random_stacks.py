"""Randomized Keras layer stacks as pipelines: loss and every gradient equal the plain Keras model's on each
micro-batch (GPipe's semantics: batch norm normalizes a micro-batch by its own moments), for random K, M, remat
policy and schedule. Each case is drawn from its own seed, so a failure names a reproducible configuration.

A stack with Dropout cannot equal plain Keras, whose masks come from its own seed stream; lingpipe draws each
mask from the step, the layer and the micro-batch. Such a stack is checked against one cell at the same M storing
its activations under the gpipe schedule: the cells, the re-computation and the schedule change no mask."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import lingpipe.keras as lk

_LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
_ROWS, _LENGTH, _DIM = 16, 4, 8


@keras.saving.register_keras_serializable(package='lingpipe_tests')
class SelfAttention(keras.layers.Layer):
  """MultiHeadAttention of a sequence on itself, as one layer a Sequential can hold."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)

  def build(self, input_shape):
    self.attention.build(input_shape, input_shape)

  def call(self, x):
    return self.attention(x, x)


_POOL = {
    'dense': lambda: keras.layers.Dense(_DIM, activation='tanh'),
    'conv': lambda: keras.layers.Conv1D(_DIM, 3, padding='same', activation='relu'),
    'layer_norm': keras.layers.LayerNormalization,
    'attention': SelfAttention,
    'batch_norm': keras.layers.BatchNormalization,
    'dropout': lambda: keras.layers.Dropout(0.3),
}


def _Case(seed):
  rng = np.random.RandomState(seed)
  kinds = [str(k) for k in rng.choice(sorted(_POOL), size=rng.randint(4, 9))]
  schedule = str(rng.choice(['gpipe', '1f1b', 'interleaved_1f1b', 'zero_bubble']))
  virtual_stages = 2 if schedule == 'interleaved_1f1b' else 1
  k = int(rng.randint(1, min(4, (len(kinds) + 2) // virtual_stages) + 1))
  return dict(kinds=kinds, k=k, m=int(rng.choice([1, 2, 4, 8])), remat=str(rng.choice(['always', 'except_last',
                                                                                       'never'])),
              schedule=schedule, virtual_stages=virtual_stages)


def _Model(kinds, seed, policy='float32'):
  keras.utils.set_random_seed(seed)
  keras.config.set_dtype_policy(policy)
  try:
    return keras.Sequential([keras.Input((_LENGTH, _DIM))] + [_POOL[kind]() for kind in kinds] +
                            [keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3)])
  finally:
    keras.config.set_dtype_policy('float32')


def _Grads(model, x, y):
  with tf.GradientTape() as tape:
    loss = _LOSS(y, model(x, training=True))
  return float(loss), [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


_SEEDS = range(28, 38)  # Ten cases that cover every schedule with K, M > 1 (checked below).
_MIXED_SEEDS = (29, 34)  # Under mixed_bfloat16: gpipe and zero bubble (the loss inside), K = 2, M = 8.


@pytest.mark.parametrize('seed,policy', [(s, 'float32') for s in _SEEDS] + [
    (s, 'mixed_bfloat16') for s in _MIXED_SEEDS])
@pytest.mark.slow
def test_a_random_stack_equals_the_plain_model_on_each_micro_batch(seed, policy):
  """Under mixed_bfloat16 too: the cells compute, and hand on, bfloat16 as Keras's own calls would."""
  case = _Case(seed)
  rng = np.random.RandomState(100 + seed)
  x = rng.normal(size=(_ROWS, _LENGTH, _DIM)).astype('float32')
  y = rng.randint(0, 3, _ROWS)
  plain = _Model(case['kinds'], seed, policy)
  pipelined = lk.Pipeline(plain, num_splits=case['k'], num_micro_batches=case['m'], remat=case['remat'],
                          schedule=case['schedule'], virtual_stages=case['virtual_stages'])
  before = [w.numpy().copy() for w in pipelined.trainable_variables]
  if 'dropout' in case['kinds']:
    reference = lk.Pipeline(_Model(case['kinds'], seed, policy), num_splits=1, num_micro_batches=case['m'],
                            remat='never')
    expected_loss, expected = _Grads(reference, x, y)
  else:
    size = _ROWS // case['m']
    parts = [_Grads(plain, x[i:i + size], y[i:i + size]) for i in range(0, _ROWS, size)]
    expected_loss = np.mean([loss for loss, _ in parts])
    expected = [np.mean([grads[i] for _, grads in parts], axis=0) for i in range(len(before))]
  if case['schedule'] == 'gpipe':
    loss, grads = _Grads(pipelined, x, y)
  else:  # The loss lives inside the pipeline: one step of SGD(1) through fit's train step shows the gradients.
    pipelined.compile(optimizer=keras.optimizers.SGD(1.0), loss=_LOSS)
    loss = pipelined.train_on_batch(x, y)
    grads = [b - w.numpy() for b, w in zip(before, pipelined.trainable_variables)]
  if policy != 'float32':
    assert pipelined.pipeline.units[0].FProp(tf.constant(x)).dtype == tf.bfloat16  # The first hand-off.
    # bfloat16's tolerance: the loss, and all the gradients together against their norm.
    assert loss == pytest.approx(expected_loss, rel=1e-3), case
    norm = np.sqrt(sum(np.sum(np.square(e)) for e in expected))
    assert np.sqrt(sum(np.sum(np.square(g - e)) for g, e in zip(grads, expected))) <= 2e-2 * norm, case
    return
  assert loss == pytest.approx(expected_loss, rel=1e-5), case
  largest = max(np.abs(g).max() for g in expected)
  for i, (e, g) in enumerate(zip(expected, grads)):
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * largest,
                               err_msg='%s: %s' % (case, pipelined.trainable_variables[i].path))


def test_the_random_cases_cover_every_schedule_policy_and_k():
  cases = [_Case(seed) for seed in _SEEDS]
  for schedule in ('gpipe', '1f1b', 'interleaved_1f1b', 'zero_bubble'):
    assert any(c['schedule'] == schedule and c['k'] > 1 and c['m'] > 1 for c in cases), schedule
  assert {c['remat'] for c in cases} == {'always', 'except_last', 'never'}
  assert len({c['k'] for c in cases}) >= 3 and len({c['m'] for c in cases}) >= 3
  assert set().union(*[c['kinds'] for c in cases]) == set(_POOL)
  assert any('dropout' in c['kinds'] and c['k'] > 1 for c in cases)


@pytest.mark.parametrize('schedule', ['gpipe', '1f1b'])
def test_a_mixed_float16_model_hands_on_float16_and_fit_scales_its_loss(schedule):
  """As Keras compiles a mixed_float16 model: the optimizer is a LossScaleOptimizer, and a step matches the plain
  model's under the same optimizer."""
  rng = np.random.RandomState(5)
  x = rng.normal(size=(_ROWS, _LENGTH, _DIM)).astype('float32')
  y = rng.randint(0, 3, _ROWS)
  kinds = ['dense', 'layer_norm', 'dense', 'attention']
  plain = _Model(kinds, 4, 'mixed_float16')
  pipelined = lk.Pipeline(_Model(kinds, 4, 'mixed_float16'), num_splits=2, num_micro_batches=1, schedule=schedule)
  for model in (plain, pipelined):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
  assert pipelined.pipeline.units[0].FProp(tf.constant(x)).dtype == tf.float16
  losses = [(plain.train_on_batch(x, y), pipelined.train_on_batch(x, y)) for _ in range(3)]
  np.testing.assert_allclose([p for _, p in losses], [q for q, _ in losses], rtol=1e-2)
  assert losses[-1][1] < losses[0][1]
