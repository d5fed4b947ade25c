"""The data the Keras examples train on, from the samples bundled in the repo, as NumPy arrays.

- CIFAR-10 (tasks/image/data/cifar10_sample: 500 training and 100 test images, 10 classes).
- Language identification: which of de, en, es, fr, ru a sentence is in, from the Tatoeba sentences of the NMT
  sample (tasks/mt/data/nmt_sample, CC BY 2.0 FR), each sentence as its UTF-8 bytes.
"""

import os

import numpy as np

from lingpipe.core import errors
from lingpipe.tasks.image import input_generator as image_input

NMT_SAMPLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'mt', 'data',
                              'nmt_sample')
# Language -> the language pair whose file of that language it reads (English from one pair, not all four).
LANGUAGES = {'de': 'de-en', 'en': 'fr-en', 'es': 'es-en', 'fr': 'fr-en', 'ru': 'ru-en'}
_SPLITS = ('train', 'dev')


def Cifar10(split, data_dir=image_input.SAMPLE_DIR):
  """(images float32 [N, 32, 32, 3] in 0..255, labels int32 [N]) of split 'train' or 'test'."""
  images, labels = image_input.ReadNpz(os.path.join(data_dir, split + '.npz'))
  return images.astype('float32'), labels.astype('int32')


def EncodeBytes(sentences, seq_len):
  """int32 [N, seq_len]: each sentence's UTF-8 bytes + 1 (0 pads), cut at seq_len."""
  out = np.zeros((len(sentences), seq_len), np.int32)
  for i, sentence in enumerate(sentences):
    encoded = np.frombuffer(sentence.encode('utf-8')[:seq_len], np.uint8).astype(np.int32) + 1
    out[i, :len(encoded)] = encoded
  return out


def LanguageId(split, seq_len=64, data_dir=NMT_SAMPLE_DIR):
  """(token ids int32 [N, seq_len] (vocabulary 257: bytes + 1, 0 pads), labels int32 [N] indexing
  sorted(LANGUAGES)) of split 'train' or 'dev', the examples of all languages interleaved in file order."""
  if split not in _SPLITS:
    raise errors.ConfigError('LanguageId: split must be one of %s, got %r.%s' % (
        ', '.join(_SPLITS), split, errors.DidYouMean(split, _SPLITS)))
  sentences, labels = [], []
  for label, language in enumerate(sorted(LANGUAGES)):
    path = os.path.join(data_dir, '%s.%s.%s' % (split, LANGUAGES[language], language))
    if not os.path.exists(path):
      raise errors.ConfigError('LanguageId: %s is missing; data_dir must hold the NMT sample\'s files '
                               '{split}.{pair}.{language} (tasks/mt/data/nmt_sample).' % path)
    with open(path, encoding='utf-8') as f:
      lines = [line.strip() for line in f if line.strip()]
    sentences += lines
    labels += [label] * len(lines)
  order = np.random.RandomState(0).permutation(len(sentences))  # Mixed, so any batch holds every language.
  return EncodeBytes([sentences[i] for i in order], seq_len), np.asarray(labels, np.int32)[order]
