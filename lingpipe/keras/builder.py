"""Keras models named by their builder function, so that Params (and the trainer's params.txt) can hold them.

A registered model wraps a Keras model builder as `task.network = lingpipe.keras.PipelineParams(builder, ...)`
(network_params.py):
a PipeliningLayer whose units are KerasLayers, each naming the builder (its dotted name, its keyword arguments
as literals, where to cut) and the piece of the built model it runs. The builder runs once for each distinct
(builder, arguments, cut) (the two most recent stay cached), and every piece is copied from that one model onto
its cell's device: the pieces fit together, and a task instantiated again meanwhile (an evaluation beside
training) starts from the same weights. A restored checkpoint overwrites them either way.

    p.network = lingpipe.keras.PipelineParams('lingpipe.tasks.keras.models.ResNet50', {'include_top': False},
                                              input_shape=[64, 32, 32, 3], num_splits=4, balance='flops')
"""

import ast
import functools

import keras
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import params_text
from lingpipe.keras import cut


def BuilderName(builder):
  """The dotted name of a builder given as a function or a name; lambdas and nested functions have none."""
  if isinstance(builder, str):
    return builder
  name = '%s.%s' % (getattr(builder, '__module__', ''), getattr(builder, '__qualname__', ''))
  if '<' in name or not callable(builder):
    raise errors.ConfigError('A Keras model builder must be a module-level function (Params keep its dotted '
                             'name), got %r.' % (builder,))
  return name


@functools.lru_cache(maxsize=2)
def _Units(name, kwargs_text, cut_at_text, policy):
  module_name, _, attribute = name.rpartition('.')
  build = params_text.ImportQualified(module_name, attribute)
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(policy or previous)
  try:
    model = build(**ast.literal_eval(kwargs_text))
  finally:
    keras.config.set_dtype_policy(previous)
  return tuple(cut.Units(model, ast.literal_eval(cut_at_text)))


def Units(builder, builder_kwargs=None, cut_at=None, fprop_dtype=None):
  """[(unit, input shape)] of the builder's model cut as lingpipe.keras cuts models (built once per process). With
  `fprop_dtype` bfloat16 or float16 (the KerasLayer's), the model is built under Keras's mixed_<dtype> policy: its
  layers compute in that dtype on float32 weights, as lingpipe's own layers do."""
  fprop_dtype = tf.as_dtype(fprop_dtype) if fprop_dtype is not None else None
  policy = 'mixed_' + fprop_dtype.name if fprop_dtype in (tf.bfloat16, tf.float16) else None
  return _Units(BuilderName(builder), repr(dict(sorted((builder_kwargs or {}).items()))), repr(cut_at), policy)
