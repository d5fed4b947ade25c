"""Generated classification data: Gaussian clusters around seeded class centres.

The centres depend only on `data_seed`, the examples on `data_seed` and `split`, so train and test share classes
but not examples. It lets every part of the framework run without any data files.
"""

import numpy as np
import tensorflow as tf

from lingpipe.core import base_input_generator
from lingpipe.core import errors

_SPLITS = ('train', 'test')


class SyntheticClassificationInput(base_input_generator.BaseInputGenerator):
  """Examples {'features': float32 [input_dim], 'labels': int32}."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('split', 'train', "'train' or 'test'.")
    p.Define('num_examples', 4096, 'Number of examples in the split.')
    p.Define('input_dim', 16, 'Depth of a feature vector.')
    p.Define('num_classes', 4, 'Number of classes.')
    p.Define('noise', 1.0, 'Stddev of the Gaussian noise around each class centre (centres have norm ~3).')
    p.Define('data_seed', 7, 'Seed of the class centres and the examples.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.split not in _SPLITS:
      raise errors.ConfigError('input.split must be one of %s, got %r.%s' % (
          ', '.join(_SPLITS), p.split, errors.DidYouMean(p.split, _SPLITS)))
    if p.num_examples <= 0 or p.input_dim <= 0 or p.num_classes < 2:
      raise errors.ConfigError('input: need num_examples > 0, input_dim > 0, num_classes >= 2.')

  def Arrays(self):
    """(features [N, input_dim] float32, labels [N] int32) as NumPy arrays."""
    p = self.params
    centres = np.random.RandomState(p.data_seed).normal(size=(p.num_classes, p.input_dim))
    centres *= 3.0 / np.sqrt(p.input_dim)
    rng = np.random.RandomState([p.data_seed, _SPLITS.index(p.split) + 1])
    labels = rng.randint(0, p.num_classes, size=p.num_examples).astype(np.int32)
    features = centres[labels] + p.noise / np.sqrt(p.input_dim) * rng.normal(size=(p.num_examples, p.input_dim))
    return features.astype(np.float32), labels

  def _Examples(self):
    features, labels = self.Arrays()
    return tf.data.Dataset.from_tensor_slices({'features': features, 'labels': labels})
