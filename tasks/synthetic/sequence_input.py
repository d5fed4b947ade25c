"""Generated token sequences for sequence tagging: the label of each position is the previous token.

Solving it needs attention to the previous position, so it exercises Transformer stacks (and their padding masks:
sequences have random lengths) without any data files.
"""

import numpy as np
import tensorflow as tf

from lingpipe.core import base_input_generator
from lingpipe.core import errors


class SyntheticSequenceInput(base_input_generator.BaseInputGenerator):
  """Examples {'ids': int32 [T], 'labels': int32 [T], 'paddings': float32 [T]} (paddings 1.0 past the end)."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('split', 'train', "'train' or 'test'.")
    p.Define('num_examples', 2048, 'Number of sequences.')
    p.Define('seq_len', 16, 'Padded length T.')
    p.Define('min_len', 8, 'Shortest real length.')
    p.Define('vocab_size', 32, 'Tokens are 1..vocab_size-1; 0 is padding and the first label.')
    p.Define('data_seed', 11, 'Seed of the sequences.')
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.split not in ('train', 'test'):
      raise errors.ConfigError("input.split must be 'train' or 'test', got %r." % p.split)
    if not 1 <= p.min_len <= p.seq_len or p.vocab_size < 3:
      raise errors.ConfigError('input: need 1 <= min_len <= seq_len and vocab_size >= 3.')

  def Arrays(self):
    p = self.params
    rng = np.random.RandomState([p.data_seed, 1 if p.split == 'train' else 2])
    ids = rng.randint(1, p.vocab_size, size=(p.num_examples, p.seq_len)).astype(np.int32)
    lengths = rng.randint(p.min_len, p.seq_len + 1, size=p.num_examples)
    paddings = (np.arange(p.seq_len)[None, :] >= lengths[:, None]).astype(np.float32)
    ids = np.where(paddings > 0, 0, ids).astype(np.int32)
    labels = np.concatenate([np.zeros([p.num_examples, 1], np.int32), ids[:, :-1]], axis=1)
    return ids, labels, paddings

  def _Examples(self):
    ids, labels, paddings = self.Arrays()
    return tf.data.Dataset.from_tensor_slices({'ids': ids, 'labels': labels, 'paddings': paddings})
