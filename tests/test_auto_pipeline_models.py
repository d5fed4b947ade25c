"""--pipeline=auto on every registered model with a pipeline, whatever its inputs (token ids and labels, images,
dicts): the planner times its layers on a sample batch, each layer on what the one before it gave."""

import io

import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.gpipe.planner import layer_times
from lingpipe.layers import embedding
from lingpipe.model import model_registry
from lingpipe.runners import pipeline_choice
from lingpipe.runners import run_params
import pipeline_test_util as util

_BATCH = 2  # The pipelines' batch, cut so that each model's layers are timed in seconds.


def _WithBatch(pipe, batch):
  shapes = pipe.input_shapes
  cut = lambda s: [batch if i == pipe.batch_dim else d for i, d in enumerate(s)]
  pipe.input_shapes = {k: cut(v) for k, v in shapes.items()} if isinstance(shapes, dict) else cut(shapes)


def _Models():
  """The registered models with a pipeline that test_models.py steps (the others are these models' layers at
  paper size, too big for a CI machine)."""
  registered = model_registry.GetAllRegisteredModels()
  return [name for name in util.PipelinedModels() if getattr(registered[name], 'ONE_STEP_TEST', 'fast') != 'skip']


@pytest.mark.parametrize('name', _Models())
@pytest.mark.slow
def test_every_registered_pipelined_model_chooses_its_pipeline(name):
  """As `lingpipe-train --mode=inspect --pipeline=auto` does."""
  p = run_params.BuildModelParams(name, auto_pipeline=True)
  (path, pipe), = run_params.Pipelines(p.task, 'task')
  _WithBatch(pipe, _BATCH)
  out = io.StringIO()
  choice = pipeline_choice.Resolve(p, num_devices=2, out=out)
  assert choice is not None and 'Pipeline %s chosen' % path in out.getvalue(), out.getvalue()
  assert all(pipe.Get(field) != pipeline_choice.AUTO for field in pipeline_choice.FIELDS)


def test_integer_inputs_stay_integers_through_the_layers():
  """An embedding's ids are sampled as integers (zeros: valid ids) when input_dtypes says so."""
  layers = [embedding.EmbeddingLayer.Params().Set(name='emb', vocab_size=16, embedding_dim=8)]
  times = layer_times.Measure(layers, [4, 5], 4, repeats=1, input_dtypes='int32')
  assert times.inputs[0] == tf.TensorSpec([4, 5], tf.int32) and len(times.forward) == 1
  with pytest.raises(errors.ConfigError, match=r"could not run layer 0 \(EmbeddingLayer\) on a sample of its inputs "
                     r"\(float32 \(4, 5\)\): .*ids must be integers.* name the others' dtypes in its input_dtypes"):
    layer_times.Measure(layers, [4, 5], 4, repeats=1)


def test_input_dtypes_refuses_what_is_no_dtype():
  p = run_params.BuildModelParams('mt.multilingual.TransformerGPipe')
  with pytest.raises(errors.ConfigError, match=r"expected None or a dtype name or a dict of them"):
    p.task.network.input_dtypes = {'src_ids': 'int33'}
