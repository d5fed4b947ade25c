"""The Keras examples (tasks/keras/, tools/keras_example.py): keras.applications.ResNet50 and a Transformer text
classifier as pipelines, transparent against the plain Keras models, on the data bundled in the repo."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import keras
import lingpipe.keras as lk
from lingpipe.core import errors
from lingpipe.keras import builder as lk_builder
from lingpipe.tasks.keras import data
from lingpipe.tasks.keras import models
import trainer_test_util as trainer_util

_LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _LossAndGrads(model, x, y):
  with tf.GradientTape() as tape:
    loss = _LOSS(y, model(x, training=True))
  return loss.numpy(), [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


@pytest.fixture
def float64():
  """Keras layers built meanwhile compute in float64. At random initialization ResNet50's gradients on these
  images are ill-conditioned in float32: feeding the plain model the same batch in reverse order moves its first
  convolution's gradient by 1.7% of the largest. In float64 the pipeline must match to 1e-9."""
  floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
  keras.config.set_floatx('float64')
  keras.config.set_dtype_policy('float64')  # Keras caches the policy (from floatx) when it builds its first layer.
  try:
    yield
  finally:
    keras.config.set_floatx(floatx)
    keras.config.set_dtype_policy(policy)


@pytest.mark.slow
def test_resnet50_in_four_cells_by_flops_equals_plain_resnet50_on_each_micro_batch(float64):
  keras.utils.set_random_seed(0)
  plain = models.ResNet50()
  pipelined = lk.Pipeline(plain, num_splits=4, num_micro_batches=2, balance='flops', remat='always')
  cells = pipelined.cells()
  assert len(cells) == 4 and all(names for _, names in cells)
  assert cells[0][1][:2] == ['scale', 'conv1_pad'] and cells[-1][1][-1] == 'predictions'
  x, y = data.Cifar10('train')
  x, y = x[:8].astype('float64'), y[:8]
  loss, grads = _LossAndGrads(pipelined, x, y)
  # GPipe's batch norm: each micro-batch of 4 images is normalized by its own moments.
  parts = [_LossAndGrads(plain, [x[i:i + 4]], y[i:i + 4]) for i in (0, 4)]
  assert loss == pytest.approx(np.mean([l for l, _ in parts]), rel=1e-9)
  largest = max(np.abs(g).max() for _, part in parts for g in part)
  for i, g in enumerate(grads):
    expected = (parts[0][1][i] + parts[1][1][i]) / 2
    np.testing.assert_allclose(g, expected, rtol=1e-9, atol=1e-9 * largest, err_msg=plain.trainable_variables[i].path)


@pytest.mark.parametrize('schedule,remat', [('gpipe', 'never'), ('1f1b', 'always')])
@pytest.mark.slow
def test_the_transformer_classifier_fits_language_ids_as_the_plain_model_does(schedule, remat):
  x, y = data.LanguageId('train', seq_len=16)
  x, y = x[:96], y[:96]

  def Fit(wrap):
    keras.utils.set_random_seed(3)
    model = wrap(models.TransformerClassifier(seq_len=16, model_dim=16, num_heads=2, hidden_dim=32, dropout=0.0))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=_LOSS, metrics=['accuracy'])
    return model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0).history, model.get_weights()

  history, weights = Fit(lambda m: m)
  pipelined_history, pipelined_weights = Fit(lambda m: lk.Pipeline(m, num_splits=2, num_micro_batches=4,
                                                                    schedule=schedule, remat=remat))
  assert pipelined_history['loss'][0] == pytest.approx(history['loss'][0], rel=1e-5)
  assert pipelined_history['accuracy'][0] == pytest.approx(history['accuracy'][0])
  for expected, actual in zip(weights, pipelined_weights):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


def test_the_language_id_data_come_from_the_nmt_sample():
  x, y = data.LanguageId('dev', seq_len=32)
  assert x.shape == (1000, 32) and x.dtype == np.int32 and np.bincount(y).tolist() == [200] * 5
  assert x.min() == 0 and x.max() <= 256  # Bytes + 1; 0 pads.
  np.testing.assert_array_equal(data.EncodeBytes(['ab'], 4), [[98, 99, 0, 0]])
  with pytest.raises(errors.ConfigError, match="split must be one of train, dev, got 'test'"):
    data.LanguageId('test')
  with pytest.raises(errors.ConfigError, match='is missing; data_dir must hold'):
    data.LanguageId('train', data_dir='/nonexistent')


def test_a_keras_builder_in_params_is_built_with_the_pipeline_and_runs_the_builders_model():
  kwargs = {'input_dim': 8, 'hidden_dims': [16, 16, 8]}
  p = lk.PipelineParams(models.Mlp, kwargs, input_shape=[12, 8], num_splits=2, num_micro_batches=3, name='net')
  text = p.ToText()  # What the trainer writes to params.txt: names and literals only.
  assert "layers[0].builder : 'lingpipe.tasks.keras.models.Mlp'" in text and 'layers[1]' not in text
  pipe = p.Instantiate()
  assert [layer.params.unit for layer in pipe.units] == [0, 1, 2]  # One piece per Dense layer.
  x = np.random.RandomState(0).normal(size=(12, 8)).astype('float32')
  plain = x
  for unit, _ in lk_builder.Units(models.Mlp, kwargs):  # The built model's pieces: the plain model.
    plain = unit(plain)
  np.testing.assert_allclose(pipe.FProp(tf.constant(x)).numpy(), plain.numpy(), rtol=1e-6, atol=1e-6)
  with pytest.raises(errors.ConfigError, match='must be a module-level function'):
    lk.PipelineParams(lambda: None, input_shape=[1])
  with pytest.raises(errors.ConfigError, match="has no 'Mpl'.*Did you mean: Mlp"):
    lk.PipelineParams('lingpipe.tasks.keras.models.Mpl', input_shape=[12, 8], name='net').Instantiate()
  with pytest.raises(errors.ConfigError, match=r'pass input_shape=\[batch, \.\.\.\]'):
    lk.PipelineParams(models.Mlp)


@pytest.mark.slow
def test_the_trainer_trains_resumes_evaluates_and_exports_a_keras_builders_model(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  model = '--model=synthetic.KerasMlpGPipe'
  code, out, _ = trainer_util.RunTrainer(capsys, model, '--logdir=' + logdir, '--max_steps=10',
                                         '--model_params_override=' + trainer_util.FAST)
  assert code == 0 and 'step 10/10 loss=' in out, out
  params_text = open(os.path.join(logdir, 'params.txt')).read()
  assert "task.network.layers[0].builder : 'lingpipe.tasks.keras.models.Mlp'" in params_text
  code, out, _ = trainer_util.RunTrainer(capsys, model, '--logdir=' + logdir, '--max_steps=15',
                                         '--model_params_override=' + trainer_util.FAST)
  assert code == 0 and 'Resumed from %s/train/ckpt-10 at step 10.' % logdir in out and 'step 15/15' in out
  code, out, _ = trainer_util.RunTrainer(capsys, model, '--logdir=' + logdir, '--mode=eval')
  assert code == 0
  metrics = json.load(open(os.path.join(logdir, 'eval_test', 'metrics-15.json')))['metrics']
  assert metrics['num_examples'] == 1024 and metrics['accuracy'] > 0.5  # 4 classes; 15 steps learn them.
  code, out, _ = trainer_util.RunTrainer(capsys, model, '--logdir=' + logdir, '--mode=export')
  assert code == 0
  serve = tf.saved_model.load(os.path.join(logdir, 'export', '15')).signatures['serving_default']
  np.testing.assert_allclose(serve(features=tf.zeros([3, 16]))['probs'].numpy().sum(-1), 1.0, rtol=1e-5)
