"""Activation functions by name, so that Params hold a string ('relu') rather than a function."""

import tensorflow as tf

from lingpipe.core import errors

_ACTIVATIONS = {
    'none': tf.identity,
    'relu': tf.nn.relu,
    'relu6': tf.nn.relu6,
    'gelu': lambda x: tf.nn.gelu(x, approximate=True),
    'tanh': tf.tanh,
    'sigmoid': tf.sigmoid,
    'swish': tf.nn.silu,
    'elu': tf.nn.elu,
}

NAMES = tuple(_ACTIVATIONS)


def GetFn(name):
  """The activation function called `name`; unknown names raise ConfigError with near matches."""
  try:
    return _ACTIVATIONS[name]
  except (KeyError, TypeError):
    raise errors.ConfigError('Unknown activation %r; expected one of %s.%s' % (
        name, ', '.join(NAMES), errors.DidYouMean(str(name), NAMES))) from None


def Check(name):
  GetFn(name)
  return name
