"""lingpipe: a TensorFlow 2 layer framework in the style of Lingvo, built around GPipe pipeline parallelism.

Importing lingpipe changes nothing in TensorFlow and does not import it; the names below load on first use. What a
pipeline wants process-wide is done by named calls (docs/guide.md, "What lingpipe changes in TensorFlow"), which the
binaries make: lingpipe-train and lingpipe-worker, whose package import is their first step, get them here.
"""

import importlib as _importlib
import os as _os
import sys as _sys

# Source checkouts (tests, Bazel) have params/ and tasks/ beside lingpipe/ rather than inside it; installs map
# them to lingpipe.params and lingpipe.tasks (setup.py package_dir). Extending __path__ makes both layouts work.
_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isdir(_os.path.join(_ROOT, 'params')) and _os.path.isdir(_os.path.join(_ROOT, 'tasks')) and \
    not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), 'params')):
  __path__.append(_ROOT)  # pylint: disable=undefined-variable

from lingpipe import native_log as _native_log  # pylint: disable=g-import-not-at-top

if _native_log.IsBinary(_sys.argv):  # Before TensorFlow loads: it reads these settings once, then.
  from lingpipe import binary as _binary  # pylint: disable=g-import-not-at-top
  _binary.SetUpConsoleScript(_sys.argv)

_EXPORTS = {
    'AbstractVariables': 'lingpipe.core.base_layer', 'BaseLayer': 'lingpipe.core.base_layer',
    'NumParams': 'lingpipe.core.base_layer', 'InstantiableParams': 'lingpipe.core.hyperparams',
    'Params': 'lingpipe.core.hyperparams', 'EnableAllocatorStats': 'lingpipe.core.memory_stats',
    'NestedMap': 'lingpipe.core.nested_map', 'WeightInit': 'lingpipe.core.weight_init',
    'WeightParams': 'lingpipe.core.weight_init', 'PipeliningLayer': 'lingpipe.gpipe.pipelining_layer',
    'MultiHeadAttention': 'lingpipe.layers.attention', 'BatchNormLayer': 'lingpipe.layers.batch_norm',
    'Conv2DLayer': 'lingpipe.layers.conv', 'DepthwiseConv2DLayer': 'lingpipe.layers.conv',
    'SeparableConv2DLayer': 'lingpipe.layers.conv', 'DropoutLayer': 'lingpipe.layers.dropout',
    'EmbeddingLayer': 'lingpipe.layers.embedding', 'LayerNormLayer': 'lingpipe.layers.layer_norm',
    'ProjectionLayer': 'lingpipe.layers.linear', 'GlobalPoolingLayer': 'lingpipe.layers.pooling',
    'Pooling2DLayer': 'lingpipe.layers.pooling', 'SequentialLayer': 'lingpipe.layers.sequential',
    'SoftmaxLayer': 'lingpipe.layers.softmax', 'TransformerDecoderLayer': 'lingpipe.layers.transformer',
    'TransformerLayer': 'lingpipe.layers.transformer',
}
_MODULES = {
    'base_input_generator': 'lingpipe.core', 'base_layer': 'lingpipe.core', 'base_model_params': 'lingpipe.model',
    'base_task': 'lingpipe.model', 'context': 'lingpipe.core', 'errors': 'lingpipe.core',
    'hyperparams': 'lingpipe.core', 'lr_schedule': 'lingpipe.core', 'model_registry': 'lingpipe.model',
    'optimizer': 'lingpipe.core', 'weight_init': 'lingpipe.core', 'cluster': 'lingpipe.distributed',
    'remote': 'lingpipe.distributed',
}


def __getattr__(name):
  """Loads an exported name on first use (PEP 562), so `import lingpipe` stays free of TensorFlow."""
  if name in _EXPORTS:
    value = getattr(_importlib.import_module(_EXPORTS[name]), name)
  elif name in _MODULES:
    value = _importlib.import_module('%s.%s' % (_MODULES[name], name))
  else:
    raise AttributeError('module lingpipe has no attribute %r' % name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(set(globals()) | set(_EXPORTS) | set(_MODULES))


__version__ = '0.1.0'

__all__ = [
    'AbstractVariables', 'BaseLayer', 'BatchNormLayer', 'Conv2DLayer', 'DepthwiseConv2DLayer', 'DropoutLayer',
    'EmbeddingLayer', 'EnableAllocatorStats', 'GlobalPoolingLayer', 'InstantiableParams', 'LayerNormLayer',
    'MultiHeadAttention', 'NestedMap', 'NumParams', 'Params', 'PipeliningLayer', 'Pooling2DLayer', 'ProjectionLayer',
    'SeparableConv2DLayer', 'SequentialLayer', 'SoftmaxLayer', 'TransformerDecoderLayer', 'TransformerLayer',
    'WeightInit', 'WeightParams', 'base_input_generator', 'base_layer', 'base_model_params', 'base_task', 'cluster',
    'context', 'errors', 'hyperparams', 'lr_schedule', 'model_registry', 'optimizer', 'remote', 'weight_init',
]
