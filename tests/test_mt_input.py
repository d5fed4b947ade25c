"""MT data: corpus files, the sentencepiece tool and in-graph tokenizer, the multilingual input generator."""

import collections
import glob
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.params.mt import multilingual
from lingpipe.tasks.mt import corpus
from lingpipe.tasks.mt import input_generator
from lingpipe.tasks.mt import vocab as vocab_lib

SAMPLE = multilingual.SAMPLE_DIR
SPM = os.path.join(SAMPLE, 'spm.model')
PAIRS = ['de-en', 'fr-en', 'es-en', 'ru-en']
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _Input(**kwargs):
  p = input_generator.MultilingualInput.Params().Set(
      file_pattern=os.path.join(SAMPLE, '{split}.{src}-{tgt}.{lang}'), pairs=PAIRS, vocab_path=SPM,
      batch_size=16, max_len=32, bucket_boundaries=[8, 16, 24, 32])
  return p.Set(**kwargs).Instantiate()


@pytest.mark.slow
def test_graph_tokenizer_segments_exactly_as_sentencepiece():
  vocab = vocab_lib.Vocabulary(SPM)
  lines = []
  for path in sorted(glob.glob(os.path.join(SAMPLE, 'dev.*'))):
    with open(path, encoding='utf-8') as f:
      lines += f.read().splitlines()
  lines += ['', '  extra   spaces ', 'unknown ☃☃ characters 日本語', 'Zürich']
  tokenizer = vocab_lib.GraphTokenizer(vocab)
  encoded = tf.function(tokenizer.Encode)(tf.constant(lines)).to_list()
  expected = vocab.Encode(lines)
  assert encoded == expected
  decoded = tokenizer.Decode(tf.ragged.constant(expected).to_tensor()).numpy()
  assert [d.decode() for d in decoded] == [vocab.Decode(ids) for ids in expected]


def test_train_spm_tool_makes_target_language_tokens_and_fixed_special_ids(tmp_path):
  for lang, text in (('de', 'ein Haus\nzwei Katzen\n'), ('en', 'a house\ntwo cats\n')):
    (tmp_path / ('train.de-en.%s' % lang)).write_text(text * 20)
  out = str(tmp_path / 'spm')
  subprocess.run([sys.executable, os.path.join(REPO, 'tools', 'train_spm.py'),
                  '--pattern=%s' % (tmp_path / '{split}.{src}-{tgt}.{lang}'), '--pairs=de-en', '--vocab_size=24',
                  '--out=%s' % out], check=True, capture_output=True)
  vocab = vocab_lib.Vocabulary(out + '.model')
  assert [vocab.sp.id_to_piece(i) for i in range(4)] == ['<pad>', '<s>', '</s>', '<unk>']
  assert vocab.LangId('en') != vocab.LangId('de')
  with pytest.raises(errors.ConfigError, match='no target-language token <2fr>'):
    vocab.LangId('fr')


def test_corpus_errors(tmp_path):
  (tmp_path / 'train.de-en.de').write_text('a\nb\nc\n')
  (tmp_path / 'train.de-en.en').write_text('a\nb\n')
  pattern = str(tmp_path / '{split}.{src}-{tgt}.{lang}')
  with pytest.raises(errors.DataError, match='Misaligned.*has 3 lines.*has 2'):
    corpus.ReadPair(pattern, 'train', 'de-en')
  with pytest.raises(errors.DataFileNotFoundError, match='train.fr-en.fr'):
    corpus.ReadPair(pattern, 'train', 'fr-en')
  with pytest.raises(errors.ConfigError, match="Unknown language code 'deu'.*Did you mean: de"):
    corpus.ParsePair('deu-en')
  with pytest.raises(errors.ConfigError, match='src-tgt'):
    corpus.ParsePair('german-english')
  with pytest.raises(errors.ConfigError, match='placeholder'):
    corpus.PairFiles(str(tmp_path / '{language}'), 'train', 'de-en')
  with pytest.raises(errors.DataFileNotFoundError, match='train_spm'):
    vocab_lib.Vocabulary(str(tmp_path / 'missing.model'))
  (tmp_path / 'bad.model').write_text('not a model')
  with pytest.raises(errors.DataError, match='not a sentencepiece model'):
    vocab_lib.Vocabulary(str(tmp_path / 'bad.model'))


def test_temperature_sampling_probabilities():
  sizes = [4000, 2000, 1000, 500]
  np.testing.assert_allclose(input_generator.MixingProbabilities(sizes, 1.0), np.array(sizes) / 7500)
  np.testing.assert_allclose(input_generator.MixingProbabilities(sizes, float('inf')), [0.25] * 4)
  p5 = input_generator.MixingProbabilities(sizes, 5.0)
  np.testing.assert_allclose(p5, np.array(sizes) ** 0.2 / np.sum(np.array(sizes) ** 0.2))
  with pytest.raises(errors.ConfigError, match='temperature must be > 0'):
    input_generator.MixingProbabilities(sizes, 0.0)


@pytest.mark.slow
def test_batches_mix_pairs_by_temperature_and_are_bucketed_and_deterministic():
  inp = _Input(temperature=float('inf'))
  counts = collections.Counter()
  batches = list(inp.GetDataset().take(60))
  assert 'p=0.250' in inp.Summary()
  for b in batches:
    counts.update(b.pair.numpy().tolist())
    length = b.src_ids.shape[1]
    assert length in (8, 16, 24, 32) and b.tgt_ids.shape[1] == length and b.src_ids.shape[0] == 16
    np.testing.assert_array_equal(b.src_paddings, (b.src_ids.numpy() == 0).astype(np.float32))
    np.testing.assert_array_equal(b.tgt_paddings, (b.tgt_ids.numpy() == 0).astype(np.float32))
    real = 1 - b.src_paddings.numpy()
    assert (real.sum(1) > length // 2 - 8).all()  # Bucketing keeps rows close to the padded length.
  share = np.array([counts[i] for i in range(4)]) / (60 * 16)
  np.testing.assert_allclose(share, 0.25, atol=0.05)  # Uniform (T=inf) despite 8:4:2:1 pair sizes.
  first = batches[0]
  vocab = inp.vocab
  row = first.src_ids.numpy()[0]
  assert row[0] == vocab.LangId('en') and row[int((row > 0).sum()) - 1] == vocab_lib.EOS_ID
  labels, ids = first.tgt_labels.numpy()[0], first.tgt_ids.numpy()[0]
  assert ids[0] == vocab_lib.BOS_ID and (ids[1:] == labels[:-1])[ids[1:] > 0].all()
  again = next(iter(_Input(temperature=float('inf')).GetDataset()))
  np.testing.assert_array_equal(again.src_ids, first.src_ids)


def test_eval_input_reads_every_line_once():
  inp = _Input(split='dev', repeat=False, shuffle=False, drop_remainder=False)
  seen = collections.Counter()
  for b in inp.GetDataset():
    seen.update(zip(b.pair.numpy().tolist(), b.index.numpy().tolist()))
  assert len(seen) == 4 * 200 and max(seen.values()) == 1


def test_input_errors(tmp_path):
  with pytest.raises(errors.ConfigError, match='pairs is empty'):
    _Input(pairs=[])
  with pytest.raises(errors.ConfigError, match='bucket_boundaries'):
    _Input(bucket_boundaries=[8, 16])
  with pytest.raises(errors.ConfigError, match='no target-language token <2it>'):
    _Input(pairs=['de-it'])
  with pytest.raises(errors.DataFileNotFoundError):
    _Input(split='nonexistent').GetDataset()
