"""SingleTaskModelParams: what a registered model defines (its datasets and its task)."""

from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.distributed import cluster

DATASETS = ('Train', 'Dev', 'Test')


class SingleTaskModelParams:
  """Subclass, define Train() and Task() (and Dev()/Test() for evaluation), and register with
  `@model_registry.RegisterSingleTaskModel`."""

  def Train(self):
    """Input generator Params of the training set."""
    raise errors.ConfigError('%s defines no Train() dataset.' % type(self).__name__)

  def Dev(self):
    """Input generator Params of the development set; defaults to Test()."""
    return self.Test()

  def Test(self):
    """Input generator Params of the test set."""
    raise errors.ConfigError('%s defines no Test() dataset; define Test() or pass --eval_dataset=Train.' %
                             type(self).__name__)

  def Task(self):
    """Task Params (a BaseTask subclass's Params())."""
    raise NotImplementedError('%s defines no Task().' % type(self).__name__)

  def Cluster(self):
    """How data-parallel replicas and pipeline splits map onto devices (lingpipe.distributed.cluster.Params)."""
    return cluster.Params()

  def Model(self, name, dataset):
    """The full model Params: `model` (its registry key), `task`, `input` (for `dataset`) and `cluster`."""
    if dataset not in DATASETS:
      raise errors.ConfigError('Unknown dataset %r; expected one of %s.%s' % (
          dataset, ', '.join(DATASETS), errors.DidYouMean(dataset, DATASETS)))
    p = hyperparams.Params()
    p.Define('model', name, 'Registry key of the model.')
    p.Define('dataset', dataset, 'Which dataset `input` reads.')
    p.Define('task', self.Task(), 'The task: network, loss, metrics, training settings.')
    p.Define('input', getattr(self, dataset)(), 'The input generator of `dataset`.')
    p.Define('cluster', self.Cluster(),
             'Replicas and the (replica, split) -> device map (lingpipe.distributed.cluster).')
    return p
