r"""Trains one shared sentencepiece model over every language of a multilingual corpus.

    python tools/train_spm.py --pattern='tasks/mt/data/nmt_sample/train.{src}-{tgt}.{lang}' \
        --pairs=de-en,fr-en,es-en,ru-en --vocab_size=4000 --out=tasks/mt/data/nmt_sample/spm

writes <out>.model and <out>.vocab. The target-language tokens <2xx> of every language in --pairs are
user-defined symbols (one id each, never split). The model is a unigram model with the identity normalization:
lingpipe's in-graph tokenizer (tasks/mt/vocab.py, used by exported SavedModels) reproduces its segmentation
exactly, which NFKC normalization would not allow. Ids: 0 <pad>, 1 <s>, 2 </s>, 3 <unk>.
"""

import argparse
import os
import sys
import tempfile


import sentencepiece as spm  # pylint: disable=g-import-not-at-top

from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
from lingpipe.tasks.mt import corpus  # pylint: disable=g-import-not-at-top


def TrainSentencePiece(pattern, pairs, vocab_size, out, split='train', languages=corpus.LANGUAGES):
  """Trains on both sides of every pair of `split`; returns the .model path."""
  langs, seen, lines = [], set(), []
  for pair in pairs:
    src_lines, tgt_lines = corpus.ReadPair(pattern, split, pair, languages)
    for lang, side in zip(corpus.ParsePair(pair, languages), (src_lines, tgt_lines)):
      if lang not in langs:
        langs.append(lang)
      # A side shared by several pairs (Multi30k's English) is counted once.
      key = corpus.PairFiles(pattern, split, pair, languages)[0 if lang == pair.split('-')[0] else 1]
      if key not in seen:
        seen.add(key)
        lines.extend(line for line in side if line.strip())
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with tempfile.NamedTemporaryFile('w', encoding='utf-8', suffix='.txt', delete=False) as f:
    f.write('\n'.join(lines) + '\n')
    text = f.name
  try:
    spm.SentencePieceTrainer.train(
        input=text, model_prefix=out, vocab_size=vocab_size, model_type='unigram', character_coverage=1.0,
        normalization_rule_name='identity', pad_id=0, bos_id=1, eos_id=2, unk_id=3,
        user_defined_symbols=[corpus.TargetToken(lang) for lang in langs], input_sentence_size=0,
        shuffle_input_sentence=False, num_threads=1, minloglevel=2)
  except RuntimeError as e:
    raise errors.ConfigError('sentencepiece could not train a %d-piece vocabulary on %d sentences: %s' % (
        vocab_size, len(lines), e)) from e
  finally:
    os.unlink(text)
  return out + '.model'


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--pattern', required=True, help='Corpus file pattern with {split} {src} {tgt} {lang}.')
  parser.add_argument('--pairs', required=True, help='Comma-separated pairs, e.g. de-en,fr-en.')
  parser.add_argument('--split', default='train')
  parser.add_argument('--vocab_size', type=int, default=8000)
  parser.add_argument('--out', required=True, help='Output prefix: writes <out>.model and <out>.vocab.')
  parser.add_argument('--extra_languages', default='', help='Comma-separated language codes to accept besides '
                      'the ISO 639-1 list of tasks/mt/corpus.py.')
  args = parser.parse_args()
  try:
    languages = tuple(corpus.LANGUAGES) + tuple(l for l in args.extra_languages.split(',') if l)
    path = TrainSentencePiece(args.pattern, args.pairs.split(','), args.vocab_size, args.out, args.split, languages)
  except errors.UserError as e:
    print('train_spm: error: %s' % e, file=sys.stderr)
    return 1
  print('Wrote %s (%d pieces)' % (path, spm.SentencePieceProcessor(model_file=path).get_piece_size()))
  return 0


if __name__ == '__main__':
  sys.exit(main())
