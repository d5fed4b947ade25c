"""lingpipe: a TensorFlow 2 layer framework in the style of Lingvo, built around GPipe pipeline parallelism."""

import os as _os
import sys as _sys

# Hide TensorFlow's C++ start-up INFO lines unless the user chose a level.
_os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')

# Source checkouts (tests, Bazel) have params/ and tasks/ beside lingpipe/ rather than inside it; installs map
# them to lingpipe.params and lingpipe.tasks (setup.py package_dir). Extending __path__ makes both layouts work.
_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isdir(_os.path.join(_ROOT, 'params')) and _os.path.isdir(_os.path.join(_ROOT, 'tasks')) and \
    not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), 'params')):
  __path__.append(_ROOT)  # pylint: disable=undefined-variable

from lingpipe import native_log as _native_log
from lingpipe.core import cpu_kernels as _cpu_kernels

# TensorFlow's oneDNN kernels where the user did not choose (measured faster, micro-batches most: cpu_kernels.py).
_cpu_kernels.PreferOneDnn()

if _native_log.IsQuietBinary(_sys.argv):  # lingpipe-train/-worker without --verbose: filtered from the start.
  _native_log.Filter()
_native_log.ImportTensorFlow()

from lingpipe.core import base_input_generator  # pylint: disable=g-import-not-at-top
from lingpipe.core import base_layer
from lingpipe.core import base_model_params
from lingpipe.core import base_task
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.core import lr_schedule
from lingpipe.core import model_registry
from lingpipe.core import optimizer
from lingpipe.core import weight_init
from lingpipe.core.base_layer import AbstractVariables
from lingpipe.core.base_layer import BaseLayer
from lingpipe.core.base_layer import NumParams
from lingpipe.core.hyperparams import InstantiableParams
from lingpipe.core.hyperparams import Params
from lingpipe.core.memory_stats import EnableAllocatorStats
from lingpipe.core.nested_map import NestedMap
from lingpipe.core.weight_init import WeightInit
from lingpipe.core.weight_init import WeightParams
from lingpipe.distributed import cluster
from lingpipe.distributed import remote
from lingpipe.gpipe.pipelining_layer import PipeliningLayer
from lingpipe.layers.attention import MultiHeadAttention
from lingpipe.layers.batch_norm import BatchNormLayer
from lingpipe.layers.conv import Conv2DLayer
from lingpipe.layers.conv import DepthwiseConv2DLayer
from lingpipe.layers.conv import SeparableConv2DLayer
from lingpipe.layers.dropout import DropoutLayer
from lingpipe.layers.embedding import EmbeddingLayer
from lingpipe.layers.layer_norm import LayerNormLayer
from lingpipe.layers.linear import ProjectionLayer
from lingpipe.layers.pooling import GlobalPoolingLayer
from lingpipe.layers.pooling import Pooling2DLayer
from lingpipe.layers.sequential import SequentialLayer
from lingpipe.layers.softmax import SoftmaxLayer
from lingpipe.layers.transformer import TransformerDecoderLayer
from lingpipe.layers.transformer import TransformerLayer

__version__ = '0.1.0'

__all__ = [
    'AbstractVariables', 'BaseLayer', 'BatchNormLayer', 'Conv2DLayer', 'DepthwiseConv2DLayer', 'DropoutLayer',
    'EmbeddingLayer', 'EnableAllocatorStats', 'GlobalPoolingLayer', 'InstantiableParams', 'LayerNormLayer',
    'MultiHeadAttention', 'NestedMap', 'NumParams', 'Params', 'PipeliningLayer', 'Pooling2DLayer', 'ProjectionLayer',
    'SeparableConv2DLayer', 'SequentialLayer', 'SoftmaxLayer', 'TransformerDecoderLayer', 'TransformerLayer',
    'WeightInit', 'WeightParams', 'base_input_generator', 'base_layer', 'base_model_params', 'base_task', 'cluster',
    'context', 'errors', 'hyperparams', 'lr_schedule', 'model_registry', 'optimizer', 'remote', 'weight_init',
]
