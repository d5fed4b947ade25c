"""lingpipe.keras.Pipeline's fields given as 'auto', chosen at its first fit (gpipe/choice/auto_config.py).

The units are timed on this process's first device at the first batch's and each micro-batch's size, in the
policy's compute dtype; the plain model and the best predicted configurations whose fullest device fits
`device_memory` (less the margin) are stepped, among the local devices (GPUs, else the logical CPU devices), and
the fastest is taken. The planner counts Adam's two optimizer slots a weight.
"""

from lingpipe.core import byte_sizes
from lingpipe.core import errors
from lingpipe.core import param_checks
from lingpipe.distributed import cluster
from lingpipe.gpipe.choice import auto_config

AUTO = param_checks.AUTO
_ADAM_SLOTS = 2


def Choose(unit_params, input_shape, batch_size, given, device_memory=None, fprop_dtype=None, input_dtypes=None):
  """({field: value} with the 'auto' fields of `given` chosen and virtual_stages, the report's lines), for a batch
  of `batch_size` shaped `input_shape` (of any batch) whose inputs that are not floating `input_dtypes` names, in
  the compute dtype `fprop_dtype`."""
  batch = batch_size or (input_shape[0] if input_shape is not None and not isinstance(input_shape, dict) else None)
  if not batch or input_shape is None:
    raise errors.ConfigError("lingpipe.keras.Pipeline: 'auto' plans from one batch's shape, and this batch's size is "
                             'unknown: fit with arrays or a dataset of a static batch size.')
  if isinstance(input_shape, dict):
    shapes = {k: [batch] + list(v)[1:] for k, v in input_shape.items()}
  else:
    shapes = [batch] + list(input_shape)[1:]
  budget = None
  if device_memory is not None:
    budget = (byte_sizes.Parse(device_memory, 'device_memory') if isinstance(device_memory, str)
              else int(device_memory))
  fixed = {k: v for k, v in given.items() if v != AUTO}
  num_devices = len(cluster.LocalDevices())
  choice = auto_config.ChooseFor(unit_params, shapes, num_devices, fixed, budget, slots=_ADAM_SLOTS,
                                 fprop_dtype=fprop_dtype, input_dtypes=input_dtypes)
  chosen = dict(given, **{k: v for k, v in auto_config.Fields(choice.chosen).items() if k not in fixed})
  lines = ['Chosen for %s (%d device(s), %s):' % (
      ', '.join(k for k in given if k not in fixed), num_devices,
      'budget %s a device' % byte_sizes.Format(budget) if budget else 'no device_memory: for speed alone')]
  lines += auto_config.Report(choice, 'device peak')
  return chosen, lines
