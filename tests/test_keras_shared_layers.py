"""lingpipe.keras.Pipeline and shared layers: a layer two pieces would hold is refused, one within a piece stays
one weight."""

import numpy as np
import pytest

import keras
from lingpipe.core import errors
import lingpipe.keras as lk

_LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _Data(rows):
  rng = np.random.RandomState(0)
  return rng.normal(size=(rows, 8)).astype('float32'), rng.randint(0, 3, rows)


def _SharedDense(calls_after_mid, calls_before_mid=1):
  """A functional model calling one Dense layer before and after a layer named 'mid'."""
  keras.utils.set_random_seed(3)
  inputs = keras.Input((8,))
  shared = keras.layers.Dense(8, activation='tanh', name='shared')
  h = inputs
  for _ in range(calls_before_mid):
    h = shared(h)
  h = keras.layers.Dense(8, activation='tanh', name='mid')(h)
  for _ in range(calls_after_mid):
    h = shared(h)
  return keras.Model(inputs, keras.layers.Dense(3, name='out')(h))


def test_a_shared_layer_cut_apart_is_refused_naming_it():
  """Each piece trains a copy of its weights: a layer called on both sides of a cut would be untied (it trained
  apart from the plain model, 8 weights against 6)."""
  for calls_after in (1, 2):
    with pytest.raises(errors.ConfigError, match=r"layer 'shared' is used in pieces 0 and 1 .*cut at mid.*untied"):
      lk.Pipeline(_SharedDense(calls_after), num_splits=2, cut_at=['mid'])
  with pytest.raises(errors.ConfigError, match=r"cuts into 1 piece\(s\).*A shared layer \(shared\)"):
    lk.Pipeline(_SharedDense(1), num_splits=2)
  dense = keras.layers.Dense(8)
  with pytest.raises(errors.ConfigError, match=r"layer 'dense.*' is used in entries 0 and 2 of the list"):
    lk.Pipeline([dense, keras.layers.Dense(8), dense], num_splits=2, input_shape=(None, 8))


@pytest.mark.parametrize('remat', ['always', 'per_layer'])
def test_a_shared_layer_within_one_piece_stays_one_weight(remat):
  plain = _SharedDense(calls_after_mid=0, calls_before_mid=2)
  pipelined = lk.Pipeline(plain, num_splits=2, num_micro_batches=2, cut_at=['mid'], remat=remat)
  assert len(pipelined.get_weights()) == len(plain.get_weights()) == 6
  x, y = _Data(rows=8)
  for model in (plain, pipelined):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS)
  plain_loss = plain.fit(x, y, batch_size=8, epochs=3, verbose=0).history['loss']
  pipelined_loss = pipelined.fit(x, y, batch_size=8, epochs=3, verbose=0).history['loss']
  np.testing.assert_allclose(pipelined_loss, plain_loss, rtol=1e-5)
  plain.set_weights(pipelined.get_weights())
