"""What the planner sees of a model: its task built abstractly (sizes only, nothing allocated), its first
PipeliningLayer, and that pipeline's candidate configurations. --pipeline=auto, the process model, the advice at a
memory death and tools/plan_pipeline.py all plan a model through here."""

from typing import List, NamedTuple

from lingpipe.core import base_layer
from lingpipe.core import errors
from lingpipe.gpipe import pipelining_layer
from lingpipe.gpipe.planner import memory_plan


class View(NamedTuple):
  """A pipeline as the planner sees it: its built layer and the facts the planner's functions take."""
  net: pipelining_layer.PipeliningLayer  # built under base_layer.AbstractVariables
  layers: List[object]  # the units' Params, one per layer the cells are cut from
  input_shapes: object  # one batch's, as the pipeline's params give them
  batch_size: int
  slots: int  # the optimizer's slot variables per weight

  @property
  def params(self):
    return self.net.params

  def Candidates(self, num_devices, **kwargs) -> List[memory_plan.Candidate]:
    """memory_plan.Candidates of this pipeline on up to `num_devices`, with its own weights' and compute dtypes and
    the optimizer's slots; `kwargs` narrow them (micro_batches, remats, schedules, balance, times, ...)."""
    return memory_plan.Candidates(self.layers, self.input_shapes, num_devices, self.batch_size, slots=self.slots,
                                  dtype_size=self.params.dtype.size, fprop_dtype=self.net.fprop_dtype, **kwargs)


def Pipelines(p) -> List[pipelining_layer.PipeliningLayer]:
  """Every PipeliningLayer of model params `p`'s task, built abstractly (the task's own code fills in the layers)."""
  with base_layer.AbstractVariables():
    task = p.task.Instantiate()
  return [layer for layer in task.Walk() if isinstance(layer, pipelining_layer.PipeliningLayer)]


def Of(p, name=None, what='plan') -> View:
  """The View of model params `p`'s pipeline named `name` (default its first); a model without one, or a pipeline
  with no input_shapes, is one ConfigError saying that nothing can `what`."""
  nets = Pipelines(p)
  named = [n for n in nets if n.params.name == name] or nets
  model = getattr(p, 'model', None) or p.task.name
  if not named:
    raise errors.ConfigError('Model %s has no PipeliningLayer to %s; the planner sizes pipelines.' % (model, what))
  net = named[0]
  if net.params.input_shapes is None:
    raise errors.ConfigError('Model %s: its pipeline %s has no input_shapes; set its input_shapes (one batch\'s '
                             'shapes, e.g. [batch, features]) to %s it.' % (model, net.path, what))
  slots = memory_plan.OptimizerSlots(p.task.train.optimizer) if 'train' in p.task else 0
  return View(net, [unit.params for unit in net.units], net.params.input_shapes,
              memory_plan.BatchSize(net.params.input_shapes, net.params.batch_dim), slots)
