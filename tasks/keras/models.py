"""Keras models a Keras user recognises, built to be pipelined by lingpipe.keras (README, tools/keras_example.py).

Each builder returns a plain functional `keras.Model` producing logits; `lingpipe.keras.Pipeline` cuts it where
its graph narrows (between ResNet blocks, between Transformer blocks).
"""

import keras


def ResNet50(num_classes=10, input_size=32, image_size=32, include_top=True, scale=True):
  """`keras.applications.ResNet50(weights=None)` on images of `input_size` pixels, resized to `image_size` (32 is
  the smallest ResNet50 takes). scale: the images are 0..255 and the model scales them to [0, 1] (False: they
  come normalized, as from lingpipe's Cifar10Input). include_top: logits over `num_classes`; else the 2048
  average-pooled features (a lingpipe task's softmax goes on top)."""
  inputs = keras.Input((input_size, input_size, 3), name='images')
  x = inputs
  if image_size != input_size:
    x = keras.layers.Resizing(image_size, image_size, name='resize')(x)
  if scale:
    x = keras.layers.Rescaling(1 / 255.0, name='scale')(x)
  return keras.applications.ResNet50(weights=None, input_tensor=x, include_top=include_top, classes=num_classes,
                                     pooling=None if include_top else 'avg', classifier_activation=None)


@keras.saving.register_keras_serializable(package='lingpipe')
class PositionEmbedding(keras.layers.Layer):
  """Adds a learned embedding of each position to a [batch, length, dim] input."""

  def __init__(self, max_length, **kwargs):
    super().__init__(**kwargs)
    self.max_length = max_length

  def build(self, input_shape):
    self.embedding = self.add_weight(shape=(self.max_length, input_shape[-1]), name='embedding',
                                     initializer=keras.initializers.RandomNormal(stddev=0.02))

  def call(self, x):
    return x + self.embedding[:x.shape[1]]

  def get_config(self):
    return dict(super().get_config(), max_length=self.max_length)


def TransformerClassifier(vocab_size=257, seq_len=64, num_classes=5, model_dim=64, num_heads=4, hidden_dim=128,
                          num_layers=2, dropout=0.1, seed=None):
  """Token ids [batch, seq_len] -> embedding + positions -> `num_layers` post-norm Transformer encoder blocks
  (multi-head self-attention and a ReLU feed-forward, each residual) -> mean over positions -> logits."""
  tokens = keras.Input((seq_len,), dtype='int32', name='tokens')
  x = keras.layers.Embedding(vocab_size, model_dim, name='embed')(tokens)
  x = PositionEmbedding(seq_len, name='positions')(x)
  for i in range(num_layers):
    attended = keras.layers.MultiHeadAttention(num_heads, model_dim // num_heads, dropout=dropout, seed=seed,
                                               name='attention_%d' % i)(x, x)
    x = keras.layers.LayerNormalization(name='attention_norm_%d' % i)(keras.layers.Add()([x, attended]))
    hidden = keras.layers.Dense(hidden_dim, activation='relu', name='hidden_%d' % i)(x)
    hidden = keras.layers.Dense(model_dim, name='output_%d' % i)(hidden)
    hidden = keras.layers.Dropout(dropout, seed=seed, name='dropout_%d' % i)(hidden)
    x = keras.layers.LayerNormalization(name='block_%d' % i)(keras.layers.Add()([x, hidden]))
  pooled = keras.layers.GlobalAveragePooling1D(name='pool')(x)
  return keras.Model(tokens, keras.layers.Dense(num_classes, name='logits')(pooled), name='transformer_classifier')


def Mlp(input_dim=16, hidden_dims=(64, 64), activation='relu'):
  """A Keras MLP [batch, input_dim] -> [batch, hidden_dims[-1]] (a lingpipe task's softmax goes on top)."""
  x = inputs = keras.Input((input_dim,), name='features')
  for i, dim in enumerate(hidden_dims):
    x = keras.layers.Dense(dim, activation=activation, name='hidden_%d' % i)(x)
  return keras.Model(inputs, x, name='mlp')
