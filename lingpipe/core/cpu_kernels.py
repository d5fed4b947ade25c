"""Which CPU kernels TensorFlow runs, and what the CPU offers: the benchmarks print both beside their figures.

TensorFlow's x86 wheels carry Eigen's and oneDNN's kernels for MatMul, convolutions and friends. TensorFlow turns
oneDNN on by itself only on CPUs with AVX512-VNNI or newer; elsewhere (older Intel, some AMD EPYC) Eigen's run,
whose input gradients are slower on small micro-batches (docs/notes/pipeline-performance.md).
`PreferOneDnn()` asks for oneDNN unless TF_ENABLE_ONEDNN_OPTS is set; TensorFlow reads it once, when it loads, so
the call must come first. The binaries, the tools and the tests make it; `import lingpipe` does not.
`OneDnnEnabled()` says what the running process got.
"""

import os
import sys

ENV_VAR = 'TF_ENABLE_ONEDNN_OPTS'
_ASKED_TOO_LATE = []  # [True] when PreferOneDnn() ran after TensorFlow had loaded.


def PreferOneDnn():
  """Asks TensorFlow for its oneDNN kernels, unless the environment already says. Effective only before TensorFlow
  is imported."""
  if ENV_VAR not in os.environ and 'tensorflow' in sys.modules:
    _ASKED_TOO_LATE.append(True)
  os.environ.setdefault(ENV_VAR, '1')


def OneDnnEnabled():
  """Whether this process's TensorFlow runs oneDNN's kernels (imports TensorFlow)."""
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
    return bool(_pywrap_util_port.IsMklEnabled())
  except (ImportError, AttributeError):  # A TensorFlow without the query: what was asked for.
    return os.environ.get(ENV_VAR, '') in ('1', 'true', 'True')


# /proc/cpuinfo flags of the matrix units lower precisions run on, as the benchmarks name them.
_BF16_FEATURES = (('amx_bf16', 'AMX-BF16'), ('avx512_bf16', 'AVX512-BF16'), ('avx512_fp16', 'AVX512-FP16'))


def CpuFeatures(cpuinfo='/proc/cpuinfo'):
  """(model name, [bfloat16/float16 matrix features present, e.g. 'AMX-BF16']) of this machine's CPU; ('unknown',
  []) where /proc/cpuinfo cannot be read (not Linux)."""
  try:
    with open(cpuinfo) as f:
      text = f.read()
  except OSError:
    return 'unknown', []
  model, flags = 'unknown', set()
  for line in text.splitlines():
    key, _, value = line.partition(':')
    if key.strip() == 'model name' and model == 'unknown':
      model = value.strip()
    elif key.strip() == 'flags' and not flags:
      flags = set(value.split())
  return model, [name for flag, name in _BF16_FEATURES if flag in flags]


def OneDnnRunsBfloat16(cpuinfo='/proc/cpuinfo'):
  """Whether bfloat16 matrix ops run oneDNN's kernels (float32 accumulation, no float32 copies of the operands):
  oneDNN on and a CPU with AVX-512. Elsewhere TensorFlow falls back to Eigen's bfloat16 kernels, whose rounding
  and temporaries differ (imports TensorFlow)."""
  try:
    with open(cpuinfo) as f:
      avx512 = ' avx512f' in f.read()
  except OSError:
    avx512 = False
  return avx512 and OneDnnEnabled()


def DescribeCpu():
  """'AMD EPYC, 2 cores, AVX512-BF16 (no AMX), oneDNN on': the line a benchmark prints before its figures."""
  model, features = CpuFeatures()
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  if not features:
    bf16 = 'no bfloat16 matrix units (neither AMX nor AVX512-BF16)'
  else:
    bf16 = ', '.join(features) + ('' if 'AMX-BF16' in features else ' (no AMX)')
  return '%s, %d cores, %s, %s' % (model, cores, bf16, Describe())


def MachineKey(speed=False):
  """This machine as a key of what was measured on it: 'CPU model; TensorFlow 2.21.0; Python 3.11.7; kernel 6.1'
  for what a process holds (the process model's cache); with `speed` the CPU as DescribeCpu says it (its cores,
  matrix units and kernels, on which a measured step time depends too: a recorded pipeline choice). Imports
  TensorFlow."""
  import platform  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return '%s; TensorFlow %s; Python %s; kernel %s' % (
      DescribeCpu() if speed else CpuFeatures()[0], tf.__version__, platform.python_version(), platform.release())


def Describe():
  """'oneDNN on', or 'oneDNN off' and why: a benchmark header's note of the kernels it ran."""
  if OneDnnEnabled():
    return 'oneDNN on'
  if _ASKED_TOO_LATE:
    return 'oneDNN off (TensorFlow was imported before cpu_kernels.PreferOneDnn())'
  if ENV_VAR not in os.environ:
    return 'oneDNN off (TensorFlow\'s default on this CPU)'
  return 'oneDNN off (%s=%s)' % (ENV_VAR, os.environ.get(ENV_VAR, ''))
