"""BaseInputGenerator: a tf.data pipeline of NestedMap batches, configured by Params.

Subclasses implement `_Examples()` returning a dataset of single examples (dicts of tensors); the base class
shuffles (seeded), repeats, batches and prefetches, so every input is deterministic for a given seed.
"""


from lingpipe.core import hyperparams
from lingpipe.core import param_checks
from lingpipe.core.nested_map import NestedMap


class BaseInputGenerator:
  """See the module docstring."""

  @classmethod
  def Params(cls):
    p = hyperparams.InstantiableParams(cls)
    p.Define('name', 'input', 'Name of the input.')
    p.Define('batch_size', 32, 'Examples per batch (per step, before micro-batching).',
             check=param_checks.Int(1))
    p.Define('shuffle', True, 'Shuffle the examples.')
    p.Define('shuffle_buffer_size', 10000, 'Shuffle buffer, in examples.', check=param_checks.Int(1))
    p.Define('repeat', True, 'Cycle through the data forever (training); False gives one pass (evaluation).')
    p.Define('drop_remainder', True, 'Drop a last, smaller batch (keeps shapes static).')
    p.Define('seed', 301, 'Seed of shuffling and any randomness in the input.',
             check=param_checks.Int())
    p.Define('prefetch', 2, 'Batches to prefetch; 0 disables.', check=param_checks.Int(0))
    p.Define('num_parallel_calls', 2, 'Parallelism of per-example maps.', check=param_checks.Int(1))
    p.Define('checkpoint_iterator', True, 'Save the input position in checkpoints, so a resumed run continues '
             'with the next batch rather than the first.')
    return p

  def __init__(self, params):
    self.params = params.Copy().Freeze()

  def _Examples(self):
    """A tf.data.Dataset of single examples, each a dict of tensors."""
    raise NotImplementedError('%s does not implement _Examples().' % type(self).__name__)

  def _Preprocess(self, example, index):
    """Per-example transformation applied after shuffling and repeating (e.g. augmentation); identity by default.

    `index` is the example's position in the (repeated) stream, an int64 scalar: seed random ops with
    (params.seed, index) and every epoch gets new, reproducible randomness.
    """
    del index
    return example

  def GetDataset(self):
    """The batched dataset of NestedMaps."""
    p = self.params
    ds = self._Examples()
    if p.shuffle:
      ds = ds.shuffle(p.shuffle_buffer_size, seed=p.seed, reshuffle_each_iteration=True)
    if p.repeat:
      ds = ds.repeat()
    ds = ds.enumerate().map(lambda index, example: self._Preprocess(example, index),
                            num_parallel_calls=p.num_parallel_calls, deterministic=True)
    ds = ds.batch(p.batch_size, drop_remainder=p.drop_remainder)
    ds = ds.map(lambda batch: NestedMap(batch))
    if p.prefetch:
      ds = ds.prefetch(p.prefetch)
    return ds

  def Summary(self):
    """A line describing the data after GetDataset() (printed when training starts); '' for none."""
    return ''

  def BatchSpec(self):
    """NestedMap of tf.TensorSpec of one batch."""
    return NestedMap(self.GetDataset().element_spec)
