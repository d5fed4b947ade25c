"""Models on generated data: they need no files and train in seconds (framework checks, the quick start)."""

from lingpipe import keras as lingpipe_keras
from lingpipe.core import optimizer
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import linear
from lingpipe.layers import sequential
from lingpipe.layers import transformer
from lingpipe.model import base_model_params
from lingpipe.model import model_registry
from lingpipe.tasks import classifier
from lingpipe.tasks.keras import models as keras_models
from lingpipe.tasks.synthetic import dense_stack
from lingpipe.tasks.synthetic import input_generator
from lingpipe.tasks.synthetic import sequence_input
from lingpipe.tasks.synthetic import sequence_tagger


@model_registry.RegisterSingleTaskModel
class Mlp(base_model_params.SingleTaskModelParams):
  """A 2-hidden-layer MLP classifying 4 Gaussian clusters in 16 dimensions."""

  INPUT_DIM = 16
  NUM_CLASSES = 4
  HIDDEN_DIMS = (64, 64)

  def _Input(self, split, num_examples):
    return input_generator.SyntheticClassificationInput.Params().Set(
        split=split, num_examples=num_examples, input_dim=self.INPUT_DIM, num_classes=self.NUM_CLASSES,
        noise=5.0, batch_size=64)

  def Train(self):
    return self._Input('train', 8192)

  def Test(self):
    return self._Input('test', 1024).Set(shuffle=False, repeat=False, drop_remainder=False)

  def Task(self):
    p = classifier.Classifier.Params().Set(name='mlp', input_dim=self.INPUT_DIM)
    dims = (self.INPUT_DIM,) + self.HIDDEN_DIMS
    p.network = sequential.SequentialLayer.Params().Set(sub=[
        linear.ProjectionLayer.Params().Set(input_dim=dims[i], output_dim=dims[i + 1], activation='relu')
        for i in range(len(self.HIDDEN_DIMS))])
    p.softmax.Set(input_dim=dims[-1], num_classes=self.NUM_CLASSES)
    p.train.Set(optimizer=optimizer.Adam.Params(), learning_rate=3e-3, max_steps=300, save_interval_steps=100,
                summary_interval_steps=10, log_interval_steps=50)
    return p


@model_registry.RegisterSingleTaskModel
class DeepMlpGPipe(Mlp):
  """Mlp's data through an 8-layer MLP cut into 2 pipeline cells, 4 micro-batches, re-materialized."""

  HIDDEN_DIMS = (64,) * 8

  def Task(self):
    p = super().Task()
    p.name = 'deep_mlp'
    p.network = pipelining_layer.PipeliningLayer.Params().Set(
        layers=p.network.sub, num_splits=2, num_micro_batches=4, remat='always',
        input_shapes=[64, self.INPUT_DIM])
    return p


@model_registry.RegisterSingleTaskModel
class DenseStack(Mlp):
  """Mlp's data through a stack of task.num_layers dense layers of width task.hidden_dim (8 x 256 here; the
  capacity benchmark sets 2048 and bisects on the depth), Adam, cut into 2 cells of 4 micro-batches."""

  def Task(self):
    p = dense_stack.DenseStackClassifier.Params().Set(name='dense_stack', input_dim=self.INPUT_DIM, num_layers=8,
                                                      hidden_dim=256)
    p.network.Set(num_splits=2, num_micro_batches=4, remat='always', input_shapes=[64, self.INPUT_DIM])
    p.softmax.Set(num_classes=self.NUM_CLASSES)
    p.train.Set(optimizer=optimizer.Adam.Params(), learning_rate=1e-3, max_steps=300, save_interval_steps=100,
                summary_interval_steps=10, log_interval_steps=50)
    return p


@model_registry.RegisterSingleTaskModel
class KerasMlpGPipe(Mlp):
  """DeepMlpGPipe's network written in Keras (tasks/keras/models.py Mlp): the trainer builds the Keras model,
  cuts it into 2 cells of KerasLayers, and trains, resumes, evaluates and exports it as its own layers."""

  HIDDEN_DIMS = (64,) * 8

  def Task(self):
    p = super().Task()
    p.name = 'keras_mlp'
    p.network = lingpipe_keras.PipelineParams(
        keras_models.Mlp, {'input_dim': self.INPUT_DIM, 'hidden_dims': list(self.HIDDEN_DIMS)},
        input_shape=[64, self.INPUT_DIM], num_splits=2, num_micro_batches=4, remat='always')
    return p


@model_registry.RegisterSingleTaskModel
class TransformerStackGPipe(base_model_params.SingleTaskModelParams):
  """A 4-layer Transformer T(4, 128, 4) tagging each token with its predecessor; 2 cells, 4 micro-batches."""

  VOCAB, SEQ_LEN, MODEL_DIM, HIDDEN_DIM, HEADS, LAYERS = 32, 16, 64, 128, 4, 4

  def _Input(self, split, num_examples):
    return sequence_input.SyntheticSequenceInput.Params().Set(
        split=split, num_examples=num_examples, seq_len=self.SEQ_LEN, vocab_size=self.VOCAB, batch_size=32)

  def Train(self):
    return self._Input('train', 4096)

  def Test(self):
    return self._Input('test', 512).Set(shuffle=False, repeat=False, drop_remainder=False)

  def Task(self):
    p = sequence_tagger.SequenceTagger.Params().Set(
        name='tagger', vocab_size=self.VOCAB, max_len=self.SEQ_LEN, model_dim=self.MODEL_DIM)
    layer = transformer.TransformerLayer.Params().Set(
        model_dim=self.MODEL_DIM, hidden_dim=self.HIDDEN_DIM, num_heads=self.HEADS)
    p.network = pipelining_layer.PipeliningLayer.Params().Set(
        layers=[layer.Copy() for _ in range(self.LAYERS)], num_splits=2, num_micro_batches=4, remat='always',
        input_shapes={'x': [32, self.SEQ_LEN, self.MODEL_DIM], 'paddings': [32, self.SEQ_LEN]})
    p.softmax.Set(input_dim=self.MODEL_DIM, num_classes=self.VOCAB)
    p.train.Set(learning_rate=3e-3, max_steps=800, save_interval_steps=200, log_interval_steps=100,
                clip_gradient_norm_to_value=1.0)
    return p


@model_registry.RegisterSingleTaskModel
class LongSequenceTransformer(base_model_params.SingleTaskModelParams):
  """The GPipe paper's memory shape in miniature: a Transformer encoder over long sequences, where activations
  outweigh weights (a layer's 3.1M parameters are 12 MiB; its activations at 256 tokens x 16, about 100 MiB).
  task.num_layers layers of depth 512, 2048 wide, 8 heads, Adam, cut into 2 cells of 4 micro-batches; the
  capacity benchmark sets the depth."""

  VOCAB, SEQ_LEN, BATCH, MODEL_DIM = 64, 256, 16, 512

  def _Input(self, split, num_examples):
    return sequence_input.SyntheticSequenceInput.Params().Set(
        split=split, num_examples=num_examples, seq_len=self.SEQ_LEN, min_len=self.SEQ_LEN, vocab_size=self.VOCAB,
        batch_size=self.BATCH)

  def Train(self):
    return self._Input('train', 1024)

  def Test(self):
    return self._Input('test', 64).Set(shuffle=False, repeat=False, drop_remainder=False)

  def Task(self):
    p = sequence_tagger.TransformerTagger.Params().Set(
        name='long_tagger', vocab_size=self.VOCAB, max_len=self.SEQ_LEN, model_dim=self.MODEL_DIM, num_layers=4)
    p.network.Set(num_splits=2, num_micro_batches=4, remat='always', input_shapes={
        'x': [self.BATCH, self.SEQ_LEN, self.MODEL_DIM], 'paddings': [self.BATCH, self.SEQ_LEN]})
    p.softmax.Set(num_classes=self.VOCAB)
    p.train.Set(optimizer=optimizer.Adam.Params(), learning_rate=1e-3, max_steps=100, save_interval_steps=50,
                log_interval_steps=10)
    return p
