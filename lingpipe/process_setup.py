"""The process-wide TensorFlow choices lingpipe makes, in one call: the trainer, the tools, the benchmarks and the
tests all make it, so they run the kernels and the graphs the trainer runs (docs/guide.md, "What lingpipe changes
in TensorFlow").
"""


def SetUpProcess():
  """oneDNN's kernels and CPU allocator statistics, each unless the environment already says; TensorFlow imported
  without its start-up notices; grappler's function specialization off. Call it before TensorFlow is imported:
  it reads the first choice when it loads and the second when it runs its first op."""
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  cpu_kernels.PreferOneDnn()
  from lingpipe import native_log  # pylint: disable=g-import-not-at-top
  native_log.ImportTensorFlow()
  from lingpipe.core import memory_stats  # pylint: disable=g-import-not-at-top
  memory_stats.EnableAllocatorStats()
  DisableFunctionSpecialization()


def DisableFunctionSpecialization():
  """Turns off grappler's function optimizer for this process (a global TensorFlow setting).

  It specializes a function for each call site whose constant inputs or unused outputs differ, so a pipeline's
  M x K cell calls are instantiated and optimized one by one and time to first step grows linearly with M. Step time
  does not change: the cell functions are not inlined anyway.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.optimizer.set_experimental_options({'function_optimization': False})
