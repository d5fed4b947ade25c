"""Models on generated data: they need no files and train in seconds (framework checks, the quick start)."""

from lingpipe.core import base_model_params
from lingpipe.core import model_registry
from lingpipe.core import optimizer
from lingpipe.layers import linear
from lingpipe.layers import sequential
from lingpipe.tasks.synthetic import classifier
from lingpipe.tasks.synthetic import input_generator


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
