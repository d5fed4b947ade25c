"""PipelineParams: a registered model's network, a PipeliningLayer running a Keras model builder's model cut
into KerasLayers (builder.py names the builder; keras_layer.py runs each piece)."""

from lingpipe.core import errors
from lingpipe.gpipe import pipelining_layer
from lingpipe.keras import builder as builder_lib
from lingpipe.keras import keras_layer


def PipelineParams(builder, builder_kwargs=None, cut_at=None, input_shape=None, **pipeline_params):
  """PipeliningLayer Params running the builder's model, cut where it narrows (or at `cut_at`), as KerasLayers.

  The model is built when the pipeline is (after the trainer has set up its devices), not here: `layers` holds
  one KerasLayer entry with unit=None, which the pipeline expands into one KerasLayer per piece.
  input_shape: the shape of an input batch, batch dimension first (a list, or a dict of lists).
  pipeline_params: num_splits, num_micro_batches, remat, schedule, balance (default 'flops', as
    lingpipe.keras.Pipeline's where the input shape is known), ...
  """
  name = builder_lib.BuilderName(builder)
  if input_shape is None:
    raise errors.ConfigError('Keras model builder %r: pass input_shape=[batch, ...], the shape of one input batch.'
                             % name)
  shape = {k: list(v) for k, v in input_shape.items()} if isinstance(input_shape, dict) else list(input_shape)
  layer = keras_layer.KerasLayer.Params().Set(
      name=name.rpartition('.')[2].lower(), builder=name, builder_kwargs=dict(builder_kwargs or {}), cut_at=cut_at,
      unit=None, input_shape=shape)
  pipeline_params.setdefault('balance', 'flops')
  return pipelining_layer.PipeliningLayer.Params().Set(layers=[layer], input_shapes=shape, **pipeline_params)
