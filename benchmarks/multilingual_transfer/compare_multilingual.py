r"""Multilingual vs bilingual on the lowest-resource pair (the GPipe paper's claim, at small scale).

    python benchmarks/multilingual_transfer/compare_multilingual.py --logdir=runs/mt_compare --seeds=1,2

For each seed, trains the model (default mt.multilingual.TransformerGPipe) twice with the same size, steps and
batch size: on all its pairs (temperature-mixed) and on its lowest-resource pair alone; decodes that pair's test
set with each and prints BLEU (sacrebleu) side by side, with the mean over seeds. Runs go through lingpipe-train
(python -m lingpipe.trainer), so every number can be reproduced one command at a time.
"""

import argparse
import json
import os
import subprocess
import sys


from lingpipe.model import model_registry  # pylint: disable=g-import-not-at-top
from lingpipe.tasks.mt import corpus  # pylint: disable=g-import-not-at-top


def _Trainer(model, logdir, mode, override, seed, steps):
  cmd = [sys.executable, '-m', 'lingpipe.trainer', '--model=' + model, '--logdir=' + logdir, '--mode=' + mode,
         '--seed=%d' % seed, '--max_steps=%d' % steps, '--model_params_override=' + override]
  print('$ ' + ' '.join(cmd[1:]), flush=True)
  result = subprocess.run(cmd, capture_output=True, text=True)
  if result.returncode:
    sys.exit(result.stderr[-3000:])
  return result.stdout


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', default='mt.multilingual.TransformerGPipe')
  parser.add_argument('--logdir', required=True)
  parser.add_argument('--seeds', default='1')
  parser.add_argument('--steps', type=int, default=0, help='Training steps (default: the model\'s max_steps).')
  args = parser.parse_args()
  p = model_registry.GetParams(args.model, 'Train')
  steps = args.steps or p.task.train.max_steps
  sizes = {pair: len(corpus.ReadPair(p.input.file_pattern, p.input.split, pair)[0]) for pair in p.input.pairs}
  low = min(sizes, key=sizes.get)
  print('Pairs (train sentence pairs): %s; lowest-resource: %s' % (
      ' '.join('%s %d' % kv for kv in sizes.items()), low), flush=True)
  setups = {'multilingual': '', 'bilingual': "input.pairs=['%s'];task.pairs=['%s']" % (low, low)}
  rows = []
  for seed in [int(s) for s in args.seeds.split(',')]:
    row = {'seed': seed}
    for name, override in setups.items():
      logdir = os.path.join(args.logdir, '%s_seed%d' % (name, seed))
      _Trainer(args.model, logdir, 'train', override, seed, steps)
      decode = "input.pairs=['%s'];task.pairs=['%s']" % (low, low)
      _Trainer(args.model, logdir, 'decode', decode, seed, steps)
      with open(os.path.join(logdir, 'decode_test', 'metrics.json')) as f:
        row[name] = json.load(f)['metrics']['bleu_%s' % low]
    rows.append(row)
    print('seed %d: %s BLEU multilingual %.2f, bilingual %.2f' % (seed, low, row['multilingual'],
                                                                  row['bilingual']), flush=True)
  mean = {name: sum(r[name] for r in rows) / len(rows) for name in setups}
  print('mean over %d seed(s): %s BLEU multilingual %.2f, bilingual %.2f (%d steps, batch %d)' % (
      len(rows), low, mean['multilingual'], mean['bilingual'], steps, p.input.batch_size))
  return 0


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal.
  sys.exit(main())
