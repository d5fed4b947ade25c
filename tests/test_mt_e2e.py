"""End to end on the bundled multilingual sample: train (K=2, M=4), decode with BLEU, export, translate strings
with the reloaded SavedModel (no lingpipe, no sentencepiece needed to serve)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TRAINER = [sys.executable, '-m', 'lingpipe.trainer', '--model=mt.multilingual.TransformerGPipe']


def _Run(*args, timeout=600):
  result = subprocess.run(TRAINER + list(args), capture_output=True, text=True, timeout=timeout)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout


def test_train_decode_export_and_translate(tmp_path):
  logdir = str(tmp_path / 'mt')
  out = _Run('--logdir=' + logdir, '--max_steps=30',
             '--model_params_override=task.train.log_interval_steps=10;task.max_decode_len=12')
  assert 'de-en 3957 (p=' in out and 'step 30/30' in out
  assert os.path.exists(os.path.join(logdir, 'train', 'spm.model'))  # The vocabulary ships with the checkpoints.

  out = _Run('--logdir=' + logdir, '--mode=decode', '--model_params_override=task.max_decode_len=12;task.beam_size=2')
  assert 'Signature: nrefs:1|case:mixed|eff:no|tok:13a' in out
  with open(os.path.join(logdir, 'decode_test', 'metrics-30.json')) as f:
    result = json.load(f)
  assert set(result['metrics']) >= {'bleu_de-en', 'bleu_fr-en', 'bleu_es-en', 'bleu_ru-en', 'bleu_macro'}
  assert result['metrics']['num_sentences'] == 800
  with open(os.path.join(logdir, 'decode_test', 'step_30', 'ru-en.hyp'), encoding='utf-8') as f:
    assert len(f.read().splitlines()) == 200
  with open(os.path.join(logdir, 'decode_test', 'step_30', 'metrics.json')) as f:
    assert json.load(f) == result  # The hypotheses and their metrics stay together.
  untrained = subprocess.run(TRAINER + ['--logdir=' + logdir, '--mode=decode',
                                        "--model_params_override=input.pairs=['en-de']"],
                             capture_output=True, text=True, timeout=600)
  assert untrained.returncode == 1 and untrained.stderr == (
      'lingpipe-train: error: input.pairs en-de: this model was trained to translate into en only (task.pairs de-en, '
      'fr-en, es-en, ru-en), not into de; decode pairs into en.\n'), untrained.stderr

  _Run('--logdir=' + logdir, '--mode=export', '--model_params_override=task.max_decode_len=12')
  export_dir = os.path.join(logdir, 'export', '30')  # TF Serving's version folder.
  assert os.path.exists(os.path.join(export_dir, 'assets', 'spm.model'))
  serve = (
      'import sys, tensorflow as tf\n'
      'f = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]\n'
      'out = f(sources=tf.constant(["Ich liebe dich.", "Je suis fatigue."]), target_language=tf.constant("en"))\n'
      'print([t.decode() for t in out["translations"].numpy()], out["scores"].shape)\n'
      'rows = f(sources=tf.constant(["Ich liebe dich.", "Je suis fatigue."]),\n'
      '         target_language=tf.constant(["en", "en"]))\n'
      'same = rows["translations"].numpy().tolist() == out["translations"].numpy().tolist()\n'
      'print("one language per source:", same)\n'
      'long = f(sources=tf.constant([" ".join(["Ich liebe dich."] * 50)]), target_language=tf.constant("en"))\n'
      'print("long truncated:", long["truncated"].numpy().tolist())\n'
      'print("lingpipe imported:", "lingpipe" in sys.modules, "sentencepiece imported:", "sentencepiece" in '
      'sys.modules)\n'
      'for sources, lang in ((["Ich liebe dich."], "de"), (["Hallo", ""], "en"), ("Hallo", "en"),\n'
      '                      (["Hallo", "Salut"], ["en", "de"]), (["Hallo", "Salut"], ["en"] * 3)):\n'
      '  try:\n'
      '    f(sources=tf.constant(sources), target_language=tf.constant(lang))\n'
      '  except tf.errors.InvalidArgumentError as e:\n'
      '    print("refused:", str(e).split("assertion failed: ")[1].splitlines()[0])\n')
  served = subprocess.run([sys.executable, '-c', serve, export_dir], capture_output=True, text=True, timeout=300)
  assert served.returncode == 0, served.stderr[-3000:]
  assert '(2,)' in served.stdout
  assert 'long truncated: [True]' in served.stdout  # Said, not silent (task.max_decode_len=12 here).
  assert 'lingpipe imported: False sentencepiece imported: False' in served.stdout
  assert ('refused: [Input `target_language` must be one of the languages this model translates into (en); got] '
          '[de]') in served.stdout
  assert 'refused: [Input `sources` must hold non-empty sentences; these indices are empty:] [1]' in served.stdout
  assert 'refused: [Input `sources` must have shape [batch] (string); got shape] []' in served.stdout
  assert 'one language per source: True' in served.stdout
  assert served.stdout.count('translates into (en); got] [de]') == 2  # The second row of a batch is refused too.
  assert ('refused: [Input `target_language` must be one language or one per source, shape [] or [batch]; got '
          'shape] [3] [for sources of shape] [2]') in served.stdout
  # A batch of rows, one target language each, as TF Serving's REST row format ("instances") sends it.
  cli = subprocess.run(['saved_model_cli', 'run', '--dir', export_dir, '--tag_set', 'serve', '--signature_def',
                        'serving_default', '--input_exprs',
                        'sources=["Ich liebe dich.", "Je suis fatigue."];target_language=["en", "en"]'],
                       capture_output=True, text=True, timeout=300)
  assert cli.returncode == 0, cli.stderr[-3000:]
  assert 'Result for output key translations:' in cli.stdout and 'Result for output key truncated:' in cli.stdout
  assert os.path.realpath(os.path.join(logdir, 'export', 'step_30')) == os.path.realpath(export_dir)  # Old name.
