"""DenseStackClassifier: a classifier whose network is a stack of equal dense layers, its depth and width plain
Params (as Lingvo's stacks take num_layers), so a depth can be set from the command line: the capacity benchmark
and tests bisect on `task.num_layers`."""

from lingpipe.core import errors
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import linear
from lingpipe.tasks import classifier


class DenseStackClassifier(classifier.Classifier):
  """input_dim -> hidden_dim, then num_layers - 1 layers hidden_dim -> hidden_dim, through `network` (a
  PipeliningLayer whose layers are set from these params), then the softmax."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('num_layers', 8, 'Dense layers in the stack (the first maps input_dim to hidden_dim).')
    p.Define('hidden_dim', 256, 'Width of every layer.')
    p.Define('activation', 'relu', 'Activation of every layer.')
    p.network = pipelining_layer.PipeliningLayer.Params()
    return p

  def __init__(self, params):
    p = params.Copy()
    if p.num_layers < 1 or p.hidden_dim < 1:
      raise errors.ConfigError('DenseStackClassifier %s: num_layers and hidden_dim must be >= 1, got %d and %d.' % (
          p.name, p.num_layers, p.hidden_dim))
    p.network = p.network.Copy().Set(name='network', cell_tpl=[], layers=[
        linear.ProjectionLayer.Params().Set(input_dim=p.input_dim if i == 0 else p.hidden_dim,
                                            output_dim=p.hidden_dim, activation=p.activation)
        for i in range(p.num_layers)])
    p.softmax.input_dim = p.hidden_dim
    super().__init__(p)
