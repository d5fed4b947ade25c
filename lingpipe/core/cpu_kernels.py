"""Which CPU kernels TensorFlow runs: lingpipe turns oneDNN on wherever the user did not choose.

TensorFlow's x86 wheels carry two kernel libraries for MatMul, convolutions and friends: Eigen's and oneDNN's.
TensorFlow turns oneDNN on by itself only on CPUs with AVX512-VNNI or newer; on others (older Intel, AMD EPYC as
on this project's machines) it runs Eigen's unless TF_ENABLE_ONEDNN_OPTS=1 is in the environment when it loads.
The two differ most where a pipeline lives, on micro-batches. Measured on an AMD EPYC, tensorflow-cpu 2.21, one
thread per process (2026-11-24):

  - the input gradient of a projection, `[m, 1024] x [1024, 1024]^T`: with Eigen 1.5x the forward's time at
    m = 512 and 1.1x at m = 2048, so the smaller the micro-batch the slower its backward; with oneDNN no slower
    than the forward at any m from 128 to 2048;
  - two pinned processes against one running the plain model, K=2 at M=4 (`tools/multiprocess_benchmark.py`,
    remat never): dense stack at batch 2048 1.31x -> 1.46x, one device's micro-batch efficiency 0.87 -> 0.96; the
    Transformer at batch 256 1.58x -> 1.56x (M=8: 1.62x -> 1.70x); and the plain models themselves ran 1.09x
    (dense), 1.14x (Transformer) and 1.68x (conv stack) faster with oneDNN.

So lingpipe's import calls `PreferOneDnn()` before it imports TensorFlow, which reads the variable once, when it
loads: a program that imported TensorFlow first keeps TensorFlow's own choice. TF_ENABLE_ONEDNN_OPTS=0 in the
environment keeps oneDNN off: the kernels, and so the rounding, of a plain TensorFlow program on such a CPU.
`OneDnnEnabled()` says what the running process got; the benchmarks print it beside their figures.
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


def DescribeCpu():
  """'AMD EPYC, 2 cores, AVX512-BF16 (no AMX), oneDNN on': the line a benchmark prints before its figures."""
  model, features = CpuFeatures()
  cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
  if not features:
    bf16 = 'no bfloat16 matrix units (neither AMX nor AVX512-BF16)'
  else:
    bf16 = ', '.join(features) + ('' if 'AMX-BF16' in features else ' (no AMX)')
  return '%s, %d cores, %s, %s' % (model, cores, bf16, Describe())


def Describe():
  """'oneDNN on', or 'oneDNN off' and why: a benchmark header's note of the kernels it ran."""
  if OneDnnEnabled():
    return 'oneDNN on'
  if _ASKED_TOO_LATE:
    return 'oneDNN off (TensorFlow was imported before lingpipe)'
  return 'oneDNN off (%s=%s)' % (ENV_VAR, os.environ.get(ENV_VAR, ''))
