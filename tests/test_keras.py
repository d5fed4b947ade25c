"""lingpipe.keras: Keras models as pipelines, transparent against the plain Keras model."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import keras
from lingpipe.core import errors
import lingpipe.keras as lk

_LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _Data(rows=24, shape=(8,), classes=3, seed=0):
  rng = np.random.RandomState(seed)
  return rng.normal(size=(rows,) + shape).astype('float32'), rng.randint(0, classes, rows)


def _Mlp(seed, dropout=0.0):
  keras.utils.set_random_seed(seed)
  layers = [keras.Input((8,)), keras.layers.Dense(16, activation='relu'), keras.layers.LayerNormalization(),
            keras.layers.Dense(16, activation='tanh')]
  if dropout:
    layers.append(keras.layers.Dropout(dropout, seed=5))
  layers += [keras.layers.Dense(12, activation='relu'), keras.layers.Dense(3)]
  return keras.Sequential(layers)


def _Transformer(seed):
  """A functional model with residual branches: it narrows only between blocks."""
  keras.utils.set_random_seed(seed)
  x = inputs = keras.Input((6, 8))
  for i in range(2):
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name='attention_%d' % i)(x, x)
    x = keras.layers.LayerNormalization(name='norm_a%d' % i)(keras.layers.Add()([x, attended]))
    hidden = keras.layers.Dense(16, activation='relu')(x)
    x = keras.layers.LayerNormalization(name='norm_f%d' % i)(keras.layers.Add()([x, keras.layers.Dense(8)(hidden)]))
  pooled = keras.layers.GlobalAveragePooling1D()(x)
  return keras.Model(inputs, keras.layers.Dense(3, name='logits')(pooled))


def _LossAndGrads(model, x, y, training=True):
  with tf.GradientTape() as tape:
    loss = _LOSS(y, model(x, training=training))
  return float(loss), tape.gradient(loss, model.trainable_variables)


def _AssertGradsClose(expected, actual):
  """rtol 1e-5, atol 1e-6 of the largest gradient anywhere (a gradient that is zero in exact arithmetic, like an
  attention key's bias, is float32 noise of that size)."""
  assert len(expected) == len(actual)
  largest = max(np.abs(np.asarray(e)).max() for e in expected)
  for e, a in zip(expected, actual):
    e, a = np.asarray(e), np.asarray(a)
    assert e.shape == a.shape
    np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6 * largest)


@pytest.mark.parametrize('k,m,remat', [(1, 1, 'always'), (2, 4, 'always'), (2, 3, 'never'), (4, 8, 'except_last'),
                                       (3, 2, 'always'), (4, 1, 'never'), (2, 4, 'per_layer'), (1, 1, 'per_layer')])
def test_a_pipelined_sequential_has_the_plain_models_loss_and_gradients(k, m, remat):
  plain = _Mlp(seed=k * 10 + m)
  pipelined = lk.Pipeline(plain, num_splits=k, num_micro_batches=m, remat=remat)
  x, y = _Data()
  loss, grads = _LossAndGrads(plain, x, y)
  pipelined_loss, pipelined_grads = _LossAndGrads(pipelined, x, y)
  assert pipelined_loss == pytest.approx(loss, rel=1e-5)
  _AssertGradsClose(grads, pipelined_grads)


@pytest.mark.parametrize('k,m,remat', [(2, 4, 'always'), (3, 2, 'never'), (4, 6, 'except_last'), (1, 12, 'always'),
                                       (2, 3, 'per_layer')])
@pytest.mark.slow
def test_a_functional_model_is_cut_where_it_narrows_and_stays_transparent(k, m, remat):
  plain = _Transformer(seed=3)
  narrow = lk.NarrowPoints(plain)
  # Between blocks, not inside a residual branch.
  assert 'norm_a0' in narrow and 'norm_f0' in narrow and 'attention_0' not in narrow
  pipelined = lk.Pipeline(plain, num_splits=k, num_micro_batches=m, remat=remat)
  x, y = _Data(rows=12, shape=(6, 8))
  loss, grads = _LossAndGrads(plain, x, y)
  pipelined_loss, pipelined_grads = _LossAndGrads(pipelined, x, y)
  assert pipelined_loss == pytest.approx(loss, rel=1e-5)
  _AssertGradsClose(grads, pipelined_grads)
  # A last, smaller batch is padded to the batch size (and that to a multiple of M).
  np.testing.assert_allclose(pipelined.predict(x, batch_size=max(5, m + 1), verbose=0), plain.predict(x, verbose=0),
                             rtol=1e-5, atol=1e-6)
  for w_plain, w_pipelined in zip(plain.get_weights(), pipelined.get_weights()):  # Same order: set_weights works.
    np.testing.assert_array_equal(w_pipelined, w_plain)


def test_units_are_placed_by_estimated_flops_unless_told_otherwise():
  plain = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255, name='scale'),
                            keras.layers.Flatten(name='flat'), keras.layers.Dense(64, name='wide'),
                            keras.layers.Dense(64, name='mid'), keras.layers.Dense(10, name='out')])
  names = lambda pipelined: [names for _, names in pipelined.cells()]
  # By count, the weightless layers would take a cell of their own; 'wide' has 95% of the flops.
  assert names(lk.Pipeline(plain, num_splits=2)) == [['scale', 'flat', 'wide'], ['mid', 'out']]
  assert names(lk.Pipeline(plain, num_splits=2, balance='uniform')) == [['scale', 'flat'], ['wide', 'mid', 'out']]
  # Where Keras cannot infer a layer's output shape (it is built by its first call), layers are counted.
  unknown = lk.Pipeline([keras.layers.Dense(4), _Counter()], num_splits=2, input_shape=(None, 8))
  assert unknown.get_config()['balance'] == 'uniform'
  assert lk.Pipeline(plain, num_splits=2).get_config()['balance'] == 'flops'


def test_a_dict_of_tensors_crosses_a_cut_named_by_a_list_of_layers():
  keras.utils.set_random_seed(4)
  inputs = keras.Input((8,))
  a = keras.layers.Dense(8, name='a')(inputs)
  b = keras.layers.Dense(8, name='b')(inputs)
  outputs = keras.layers.Dense(3, name='out')(keras.layers.Concatenate()([a, keras.layers.Multiply()([a, b])]))
  plain = keras.Model(inputs, outputs, name='gated')
  assert lk.NarrowPoints(plain) == ['concatenate']
  pipelined = lk.Pipeline(plain, num_splits=2, num_micro_batches=4, cut_at=[['a', 'b']])
  assert [names for _, names in pipelined.cells()] == [['a', 'b'], ['multiply', 'concatenate', 'out']]
  x, y = _Data()
  loss, grads = _LossAndGrads(plain, x, y)
  pipelined_loss, pipelined_grads = _LossAndGrads(pipelined, x, y)
  assert pipelined_loss == pytest.approx(loss, rel=1e-5)
  _AssertGradsClose(grads, pipelined_grads)


def test_each_cells_variables_live_on_its_device_and_the_given_model_is_left_alone():
  plain = _Mlp(seed=1)
  before = [w.copy() for w in plain.get_weights()]
  pipelined = lk.Pipeline(plain, num_splits=4, num_micro_batches=2)
  p = pipelined.pipeline
  for k in range(4):
    devices = {tf.DeviceSpec.from_string(v.value.device).device_index
               for unit in p.CellLayers(k) for v in unit.keras_layer.variables}
    assert devices == {tf.DeviceSpec.from_string(p.devices[k]).device_index} == {k}
  pipelined.compile(optimizer=keras.optimizers.SGD(0.5), loss=_LOSS)
  pipelined.fit(*_Data(), batch_size=8, epochs=1, verbose=0)
  for b, w in zip(before, plain.get_weights()):
    np.testing.assert_array_equal(b, w)


@pytest.mark.slow
def test_fit_gives_the_weights_plain_fit_gives():
  x, y = _Data(rows=40)  # Batches of 16, 16 and 8 rows: Keras traces the last with the batch size left open.
  plain = _Mlp(seed=7)
  pipelined = lk.Pipeline(plain, num_splits=2, num_micro_batches=4, remat='always')
  for model in (plain, pipelined):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS, metrics=['accuracy'])
  history = plain.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
  pipelined_history = pipelined.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0,
                                    validation_data=(x[:8], y[:8]))
  assert pipelined_history.history['loss'][0] == pytest.approx(history.history['loss'][0], rel=1e-5)
  assert 'val_accuracy' in pipelined_history.history
  for w_plain, w_pipelined in zip(plain.get_weights(), pipelined.get_weights()):
    np.testing.assert_allclose(w_pipelined, w_plain, rtol=1e-5, atol=1e-6)
  assert pipelined.evaluate(x, y, batch_size=16, verbose=0) == pytest.approx(
      plain.evaluate(x, y, batch_size=16, verbose=0), rel=1e-5)


def _RegularizedMlp(seed, extra=()):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu', kernel_regularizer='l2'),
                           keras.layers.LayerNormalization(), *extra, keras.layers.Dense(16, activation='tanh'),
                           keras.layers.Dense(12, activation='relu'), keras.layers.Dense(3)])


def _Fit(model, x, y, epochs=1):
  model.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS, metrics=['accuracy'])
  return model.fit(x, y, batch_size=24, epochs=epochs, shuffle=False, verbose=0).history


@pytest.mark.parametrize('schedule,k,m,remat,v', [('1f1b', 2, 4, 'always', 1), ('1f1b', 3, 6, 'never', 1),
                                                  ('1f1b', 4, 8, 'except_last', 1),
                                                  ('interleaved_1f1b', 2, 4, 'always', 2),
                                                  ('interleaved_1f1b', 2, 3, 'never', 2),
                                                  ('zero_bubble', 2, 4, 'always', 1),
                                                  ('zero_bubble', 3, 6, 'never', 1)])
@pytest.mark.slow
def test_fit_with_the_loss_inside_the_pipeline_gives_plain_fits_weights_loss_and_metrics(schedule, k, m, remat, v):
  x, y = _Data(rows=72)  # 3 steps of 24 rows.
  plain = _RegularizedMlp(seed=k + m)
  pipelined = lk.Pipeline(_RegularizedMlp(seed=k + m), num_splits=k, num_micro_batches=m, remat=remat,
                          schedule=schedule, virtual_stages=v)
  assert len(pipelined.cells()) == k * v
  history, pipelined_history = _Fit(plain, x, y), _Fit(pipelined, x, y)
  for name in ('loss', 'accuracy'):
    assert pipelined_history[name][0] == pytest.approx(history[name][0], rel=1e-5), name
  for w_plain, w_pipelined in zip(plain.get_weights(), pipelined.get_weights()):
    np.testing.assert_allclose(w_pipelined, w_plain, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_batch_norm_and_dropout_train_alike_under_every_schedule():
  x, y = _Data(rows=48)
  extra = lambda: [keras.layers.BatchNormalization(), keras.layers.Dropout(0.3, seed=3)]
  results = []
  for schedule, v in (('gpipe', 1), ('1f1b', 1), ('interleaved_1f1b', 2), ('zero_bubble', 1)):
    pipelined = lk.Pipeline(_RegularizedMlp(seed=4, extra=extra()), num_splits=2, num_micro_batches=4,
                            schedule=schedule, virtual_stages=v)
    results.append((_Fit(pipelined, x, y, epochs=2)['loss'], pipelined.get_weights()))
  for losses, weights in results[1:]:  # The same masks and moments, the same moving averages.
    np.testing.assert_allclose(losses, results[0][0], rtol=1e-5)
    for expected, actual in zip(results[0][1], weights):
      np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('num_replicas,m', [(1, 4), (2, 2)])
def test_batch_norm_normalizes_each_micro_batch_and_moves_its_averages_by_the_whole_batch(num_replicas, m):
  keras.utils.set_random_seed(2)
  plain = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.BatchNormalization(momentum=0.9),
                            keras.layers.Dense(3)])
  pipelined = lk.Pipeline(plain, num_splits=2, num_micro_batches=m, num_replicas=num_replicas)
  x, _ = _Data()
  outputs = pipelined(x, training=True)
  # Each micro-batch of 6 rows is normalized by its own moments, as GPipe does.
  np.testing.assert_allclose(outputs, np.concatenate([plain(part, training=True) for part in np.split(x, 4)]),
                             rtol=1e-5, atol=1e-5)
  plain_bn = plain.layers[1]
  plain_bn.moving_mean.assign(np.zeros(16, 'float32'))
  plain_bn.moving_variance.assign(np.ones(16, 'float32'))
  plain(x, training=True)  # The whole batch at once.
  bn = pipelined.units[1]
  np.testing.assert_allclose(bn.moving_mean.numpy(), plain_bn.moving_mean.numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(bn.moving_variance.numpy(), plain_bn.moving_variance.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_dropout_masks_are_redrawn_exactly_by_the_recomputation_and_anew_each_step():
  x, y = _Data()
  plain = _Mlp(seed=5, dropout=0.5)
  recomputing = lk.Pipeline(plain, num_splits=2, num_micro_batches=3, remat='always')
  storing = lk.Pipeline(plain, num_splits=2, num_micro_batches=3, remat='never')
  loss, grads = _LossAndGrads(storing, x, y)
  recomputed_loss, recomputed_grads = _LossAndGrads(recomputing, x, y)
  assert recomputed_loss == pytest.approx(loss, rel=1e-6)
  _AssertGradsClose(grads, recomputed_grads)
  assert _LossAndGrads(storing, x, y)[0] != loss  # The next step draws other masks.
  assert _LossAndGrads(storing, x, y, training=False)[0] == pytest.approx(_LossAndGrads(plain, x, y, False)[0])


def test_fit_with_dropout_and_a_smaller_last_batch():
  x, y = _Data(rows=40)  # Batches of 16, 16 and 8: Keras traces its step function twice.
  pipelined = lk.Pipeline(_Mlp(seed=6, dropout=0.5), num_splits=2, num_micro_batches=4)
  pipelined.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS)
  history = pipelined.fit(x, y, batch_size=16, epochs=2, verbose=0)
  assert np.all(np.isfinite(history.history['loss']))


@pytest.mark.slow
def test_save_load_model_and_export_keep_the_weights_the_optimizer_and_the_dropout_step(tmp_path):
  x, y = _Data(rows=32)
  keras.utils.set_random_seed(8)
  plain = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu'),
                            keras.layers.BatchNormalization(), keras.layers.Dropout(0.3, seed=5),
                            keras.layers.Dense(3)])  # Keras saves no SeedGenerator state: an unseeded Dropout
  pipelined = lk.Pipeline(plain, num_splits=2, num_micro_batches=4)  # would draw a new seed when loaded.
  pipelined.compile(optimizer=keras.optimizers.Adam(0.01), loss=_LOSS)
  pipelined.fit(x, y, batch_size=16, epochs=1, verbose=0)
  # Adam's slots live beside their variables, not all on cell 0's device.
  slots = {v.path: v for v in pipelined.optimizer.variables}
  for v in pipelined.trainable_variables:
    for slot in ('momentum', 'velocity'):
      key = '%s/%s_%s' % (pipelined.optimizer.name, v.path.replace('/', '_'), slot)  # 'adam_1' after another Adam.
      assert slots[key].value.device == v.value.device, v.path
  assert {v.value.device for v in pipelined.trainable_variables} == {
      '/job:localhost/replica:0/task:0/device:CPU:%d' % k for k in (0, 1)}
  pipelined.save(tmp_path / 'model.keras')
  loaded = keras.saving.load_model(tmp_path / 'model.keras')
  assert isinstance(loaded, lk.Pipeline) and loaded.cells() == pipelined.cells()
  for saved, restored in zip(pipelined.get_weights(), loaded.get_weights()):
    np.testing.assert_array_equal(restored, saved)
  for saved, restored in zip(pipelined.optimizer.variables, loaded.optimizer.variables):
    np.testing.assert_array_equal(restored.numpy(), saved.numpy(), err_msg=saved.path)
  # Training goes on as it would have: the same step, the same dropout masks.
  pipelined.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
  loaded.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
  for a, b in zip(pipelined.get_weights(), loaded.get_weights()):
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
  # The SavedModel serves a batch of any size (5: M=4 does not divide it) with TensorFlow alone.
  pipelined.export(str(tmp_path / 'export'))
  np.save(tmp_path / 'x.npy', x[:5])
  serve = subprocess.run([sys.executable, '-c', (
      'import sys, numpy as np, tensorflow as tf\n'
      'served_model = tf.saved_model.load(sys.argv[1])\n'
      'served = served_model.serve(np.load(sys.argv[2]))\n'
      'assert not [m for m in sys.modules if m.startswith("lingpipe")], "imported lingpipe"\n'
      'np.save(sys.argv[3], served.numpy())\n'), str(tmp_path / 'export'), str(tmp_path / 'x.npy'),
      str(tmp_path / 'y.npy')], capture_output=True, text=True, timeout=120)
  assert serve.returncode == 0, serve.stderr[-2000:]
  np.testing.assert_allclose(np.load(tmp_path / 'y.npy'), pipelined.predict(x[:5], verbose=0), rtol=1e-5, atol=1e-6)
  # A loaded pipeline is built and exports before any call, for the input shape it was built for.
  fresh = keras.saving.load_model(tmp_path / 'model.keras')
  assert fresh.built
  fresh.export(str(tmp_path / 'fresh_export'))
  exported = tf.saved_model.load(str(tmp_path / 'fresh_export'))  # Held: its functions use its variables.
  np.testing.assert_allclose(exported.serve(x[:5]).numpy(), fresh.predict(x[:5], verbose=0), rtol=1e-5, atol=1e-6)


class _StopAfterEpoch(keras.callbacks.Callback):
  """Interrupts fit as a killed job would, after the given epoch's backup."""

  def __init__(self, epoch):
    super().__init__()
    self.epoch = epoch

  def on_epoch_end(self, epoch, logs=None):
    if epoch == self.epoch:
      raise KeyboardInterrupt('stopped after epoch %d' % epoch)


@pytest.mark.slow
def test_backup_and_restore_resumes_an_interrupted_fit_where_it_stopped(tmp_path):
  """A Pipeline of a built model is built, as Keras's BackupAndRestore requires before fit."""
  x, y = _Data(rows=32)

  def Fit(pipelined, callbacks, epochs=3):
    return pipelined.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)

  whole = lk.Pipeline(_Mlp(seed=4), num_splits=2, num_micro_batches=2)
  whole.compile(optimizer=keras.optimizers.Adam(0.01), loss=_LOSS)
  Fit(whole, [])
  interrupted = lk.Pipeline(_Mlp(seed=4), num_splits=2, num_micro_batches=2)
  assert interrupted.built
  interrupted.compile(optimizer=keras.optimizers.Adam(0.01), loss=_LOSS)
  backup = str(tmp_path / 'backup')
  with pytest.raises(KeyboardInterrupt):
    Fit(interrupted, [keras.callbacks.BackupAndRestore(backup), _StopAfterEpoch(1)])
  resumed = lk.Pipeline(_Mlp(seed=5), num_splits=2, num_micro_batches=2)  # Other initial weights: all restored.
  resumed.compile(optimizer=keras.optimizers.Adam(0.01), loss=_LOSS)
  history = Fit(resumed, [keras.callbacks.BackupAndRestore(backup)])
  assert len(history.history['loss']) == 1  # Only the third epoch ran.
  for a, b in zip(whole.get_weights(), resumed.get_weights()):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_a_training_call_after_fit_traces_its_own_cells():
  """Cells traced inside fit's step function captured that graph's step seed; a training call of the model
  afterwards (another graph, same shapes) must not reuse them (it failed with "is out of scope")."""
  x, y = _Data(rows=16)
  pipelined = lk.Pipeline(_Mlp(seed=9, dropout=0.5), num_splits=2, num_micro_batches=4)
  pipelined.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS)
  pipelined.fit(x, y, batch_size=8, epochs=1, verbose=0)
  first, second = pipelined(x[:8], training=True), pipelined(x[:8], training=True)
  assert np.all(np.isfinite(first)) and not np.allclose(first, second)  # New masks each call.


class _Counter(keras.layers.Layer):
  """Keeps a count in a non-trainable variable its forward assigns."""

  def build(self, input_shape):
    self.count = self.add_weight(shape=(), initializer='zeros', trainable=False, name='count')

  def call(self, x):
    self.count.assign_add(1.0)
    return x


def test_what_cannot_be_pipelined_is_a_clear_error():
  plain = _Transformer(seed=1)
  with pytest.raises(errors.ConfigError, match=r"does not narrow to attention_0.*narrows after: .*norm_a0"):
    lk.Pipeline(plain, num_splits=2, cut_at=['attention_0'])
  with pytest.raises(errors.ConfigError, match=r"cut_at names layer 'norm_a9'.*Did you mean: .*norm_a0"):
    lk.Pipeline(plain, num_splits=2, cut_at=['norm_a9'])
  with pytest.raises(errors.ConfigError, match='num_splits 3 is larger than the number of layers 2'):
    lk.Pipeline([keras.layers.Dense(4), keras.layers.Dense(2)], num_splits=3, input_shape=(None, 3))
  with pytest.raises(errors.ConfigError, match='is assigned by the forward pass'):
    lk.Pipeline([keras.layers.Dense(4), _Counter()], num_splits=2, input_shape=(None, 3))(
        np.ones((4, 3), 'float32'), training=True)
  with pytest.raises(errors.ConfigError, match='a batch of 24 rows does not split into num_micro_batches=5'):
    lk.Pipeline(_Mlp(seed=1), num_splits=2, num_micro_batches=5)(_Data()[0], training=True)
  with pytest.raises(errors.ConfigError, match=r"built for inputs of shape \(None, 8\) .*and got \(24, 10\)"):
    lk.Pipeline(_Mlp(seed=1), num_splits=2, num_micro_batches=2)(np.ones((24, 10), 'float32'))
  with pytest.raises(errors.ConfigError, match='functional keras.Model'):
    lk.Pipeline(object(), num_splits=2)
  one_f_one_b = lk.Pipeline(_Mlp(seed=1), num_splits=2, num_micro_batches=2, schedule='1f1b')
  with pytest.raises(errors.ConfigError, match=r"schedule '1f1b' computes the loss inside the pipeline, so it "
                     r"trains through fit\(\)"):
    one_f_one_b(_Data()[0], training=True)
  one_f_one_b.compile(optimizer='sgd', loss=_LOSS)
  with pytest.raises(errors.ConfigError, match='trains on batches of one static size'):
    one_f_one_b.fit(*_Data(rows=20), batch_size=8, verbose=0)  # 8, 8 and 4 rows.
  one_f_one_b.compile(optimizer='sgd', loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                                       reduction='sum'))
  with pytest.raises(errors.ConfigError, match=r"Crossentropy sums over the batch \(reduction='sum'\)"):
    one_f_one_b.fit(*_Data(rows=16), batch_size=8, verbose=0)


def test_summary_shows_each_cells_device_and_layers():
  model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation='relu', name='hidden'),
                            keras.layers.Dense(4, name='logits')])
  pipelined = lk.Pipeline(model, num_splits=2, num_micro_batches=2)
  lines = []
  pipelined.summary(print_fn=lambda line, **unused: lines.append(line))
  assert lines[-3:] == [' Pipeline: 2 cells on 2 devices, 2 micro-batches, remat always, schedule gpipe',
                        '   cell 0 on %s: hidden' % pipelined.cells()[0][0],
                        '   cell 1 on %s: logits' % pipelined.cells()[1][0]], lines


@pytest.mark.parametrize('schedule', ['gpipe', '1f1b'])
@pytest.mark.slow
def test_replicas_fit_the_weights_plain_fit_gives(schedule):
  """R=2 replicas of a K=2 pipeline, each fed half of every batch: fit equals the plain model on the whole batch."""
  x, y = _Data(rows=32)
  plain = _RegularizedMlp(seed=3)
  pipelined = lk.Pipeline(plain, num_splits=2, num_micro_batches=2, num_replicas=2, schedule=schedule)
  assert [d[-1] for d in pipelined.pipeline.ReplicaDevices(1)] == ['2', '3']  # The second replica's own devices.
  for model in (plain, pipelined):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS)
  history = plain.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
  pipelined_history = pipelined.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
  np.testing.assert_allclose(pipelined_history['loss'], history['loss'], rtol=1e-5)
  for w_plain, w_pipelined in zip(plain.get_weights(), pipelined.get_weights()):
    np.testing.assert_allclose(w_pipelined, w_plain, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(pipelined.predict(x, batch_size=16, verbose=0), plain.predict(x, verbose=0),
                             rtol=1e-5, atol=1e-5)
  with pytest.raises(errors.ConfigError, match='a batch of 15 rows does not split into num_replicas=2 equal'):
    pipelined(x[:15])


def test_a_strategy_scope_is_refused_in_one_line_that_names_num_replicas():
  strategy = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])
  with strategy.scope():
    with pytest.raises(errors.ConfigError, match=r'cannot build inside the scope of MirroredStrategy: .*'
                       r'Pipeline\(\.\.\., num_replicas=R\)'):
      lk.Pipeline(_Mlp(seed=1), num_splits=2)
  pipelined = lk.Pipeline(_Mlp(seed=1), num_splits=2)
  pipelined.compile(optimizer='sgd', loss=_LOSS)
  with strategy.scope():
    with pytest.raises(errors.ConfigError, match='cannot fit inside the scope of MirroredStrategy'):
      pipelined.fit(*_Data(rows=8), batch_size=8, verbose=0)
  with pytest.raises(errors.ConfigError, match=r'3 replicas x 2 splits need 6 devices, and this process has 4 .*'
                     r'ConfigureLocalDevices\(6\).*devices= as 3 lists of 2'):
    lk.Pipeline(_Mlp(seed=1), num_splits=2, num_replicas=3)
  with pytest.raises(errors.ConfigError, match='devices lists 1 replica.* and num_replicas is 2'):
    lk.Pipeline(_Mlp(seed=1), num_splits=2, num_replicas=2, devices=['/cpu:0', '/cpu:1'])


def test_a_batch_that_m_does_not_divide_is_one_line_of_ours_before_keras_runs():
  pipelined = lk.Pipeline(_Mlp(seed=1), num_splits=2, num_micro_batches=4)
  pipelined.compile(optimizer='sgd', loss=_LOSS)
  x, y = _Data(rows=40)
  for data, kwargs, where in (((x, y), dict(batch_size=10), 'batch_size of 10 rows'),
                              ((tf.data.Dataset.from_tensor_slices((x, y)).batch(10, drop_remainder=True),), {},
                               "the dataset's batch of 10 rows")):
    with pytest.raises(errors.ConfigError) as raised:
      pipelined.fit(*data, verbose=0, **kwargs)
    message = str(raised.value)
    assert message == ("lingpipe.keras.Pipeline 'pipeline': %s does not split into num_micro_batches=4 equal "
                       'micro-batches. Use a batch size that is a multiple of 4 (e.g. 8 or 12), or num_micro_batches '
                       'of 1, 2, 5, 10.' % where), message
  assert pipelined.fit(x, y, batch_size=8, verbose=0)  # 8 divides; the last batch of 40 rows is whole too.
  # Evaluation pads: any batch size works.
  assert np.isfinite(pipelined.evaluate(x, y, batch_size=10, verbose=0))


def test_a_model_of_several_inputs_takes_them_as_a_list_or_a_dict_as_keras_does(tmp_path):
  keras.utils.set_random_seed(3)
  a, b = keras.Input((8,), name='a'), keras.Input((5,), name='b')
  hidden = keras.layers.Dense(16, activation='relu')(keras.layers.Concatenate()([a, b]))
  plain = keras.Model([a, b], keras.layers.Dense(3)(keras.layers.Dense(12, activation='tanh')(hidden)))
  pipelined = lk.Pipeline(plain, num_splits=2, num_micro_batches=2)
  xa, xb = _Data(rows=16)[0], _Data(rows=16, shape=(5,), seed=1)[0]
  expected = plain.predict([xa, xb], verbose=0)
  np.testing.assert_allclose(pipelined.predict([xa, xb], verbose=0), expected, atol=1e-5)
  np.testing.assert_allclose(pipelined.predict({'a': xa, 'b': xb}, verbose=0), expected, atol=1e-5)
  pipelined.compile(optimizer='sgd', loss=_LOSS)
  pipelined.fit([xa, xb], _Data(rows=16)[1], batch_size=8, verbose=0)
  with pytest.raises(errors.ConfigError, match=r"^lingpipe.keras.Pipeline 'pipeline': the model takes 2 inputs "
                     r"\(a, b\), and got a list of 3\. Feed a list in that order or a dict by those names\.$"):
    pipelined.fit([xa, xb, xb], _Data(rows=16)[1], batch_size=8, verbose=0)
  path = str(tmp_path / 'two.keras')
  pipelined.save(path)
  np.testing.assert_allclose(keras.saving.load_model(path).predict([xa, xb], verbose=0),
                             pipelined.predict([xa, xb], verbose=0), atol=1e-6)
