r"""--pipeline=auto against doing nothing, in real training: each registered model's choice, its plain model and its
registered configuration, trained side by side and alternating.

    python benchmarks/auto_choice_models.py --write_docs

For each model (by default every registered CIFAR-10 and NMT model that a CPU machine steps; the others are the
same models at paper size), `lingpipe-train --pipeline=auto` first chooses in a fresh logdir, as a user's first
run does: the choice and the time it took are read from what it prints. Then three trainers train the model from
fresh logdirs for --steps steps: the plain model (one cell, one micro-batch, activations stored), the registered
configuration, and the choice (as the override it printed); the three alternate for --rounds rounds, each round
starting with the next of them. A run's speed
is the trainer's own steps/s over the steps after the first (which traces). The table gives the median over the
rounds, the range, and the choice over the better of the other two (the target: at least 0.95).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from lingpipe import process_setup

process_setup.SetUpProcess()  # Before TensorFlow loads.

from lingpipe import binary  # pylint: disable=g-import-not-at-top
from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
from lingpipe.model import model_registry  # pylint: disable=g-import-not-at-top

import benchmark_page  # pylint: disable=g-import-not-at-top

_PLAIN = "task.network.num_splits=1;task.network.num_micro_batches=1;task.network.remat='never'"
_QUIET = 'task.train.save_interval_steps=100000;task.train.summary_interval_steps=100000'


def DefaultModels():
  """The registered CIFAR-10 and NMT models with a pipeline that test_models.py steps (not the paper-size ones)."""
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  names = []
  for name, cls in sorted(model_registry.GetAllRegisteredModels().items()):
    if not name.startswith(('image.cifar10.', 'mt.')) or getattr(cls, 'ONE_STEP_TEST', 'fast') == 'skip':
      continue
    if cluster.PipelineParams(model_registry.GetParams(name, 'Train').task):
      names.append(name)
  return names


def _Trainer(model, logdir, steps, override, extra=()):
  """(return code, stdout and stderr) of lingpipe-train on `model` for `steps` steps."""
  command = [sys.executable, '-m', 'lingpipe.trainer', '--model=' + model, '--logdir=' + logdir,
             '--max_steps=%d' % steps, '--model_params_override=%s;task.train.log_interval_steps=%d;%s' % (
                 override, steps, _QUIET) if override else
             '--model_params_override=task.train.log_interval_steps=%d;%s' % (steps, _QUIET)] + list(extra)
  done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
  return done.returncode, done.stdout + done.stderr


def Choose(model, scratch):
  """(the override --pipeline=auto printed, the seconds it said choosing took, its configuration line)."""
  code, text = _Trainer(model, tempfile.mkdtemp(dir=scratch), 1, '', ['--pipeline=auto'])
  override = re.search(r'As an override: --model_params_override="([^"]+)"', text)
  if code or not override:
    raise SystemExit('auto_choice_models: --pipeline=auto failed on %s:\n%s' % (model, text[-3000:]))
  took = re.search(r'layers timed here in ([\d.]+) s', text)
  chosen = re.search(r'^\s+chosen\s+(.*?)\s{2,}', text, re.M)
  return override.group(1), float(took.group(1)) if took else float('nan'), chosen.group(1) if chosen else '?'


def StepsPerSecond(model, override, steps, scratch):
  code, text = _Trainer(model, tempfile.mkdtemp(dir=scratch), steps, override)
  rates = re.findall(r'steps/s=([\d.]+)', text)
  if code or not rates:
    print('  %s (%s) failed: %s' % (model, override or 'registered', text.strip().splitlines()[-1]), flush=True)
    return None
  return float(rates[-1])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--models', default=None, help='Registered models, comma-separated (default: DefaultModels).')
  parser.add_argument('--steps', type=int, default=20, help='Steps each run trains (the first is not timed).')
  parser.add_argument('--rounds', type=int, default=2, help='Times the three runs alternate.')
  parser.add_argument('--write_docs', action='store_true', help='Write the table into docs/benchmarks.md.')
  args = parser.parse_args(argv)
  models = args.models.split(',') if args.models else DefaultModels()
  scratch = tempfile.mkdtemp(prefix='lingpipe-auto-choice-')
  commit = benchmark_page.Commit()
  rows = []
  try:
    with benchmark_page.Recording() as printed:
      print('# --pipeline=auto in training against the plain model and the registered configuration (%s)' %
            cpu_kernels.DescribeCpu())
      for model in models:
        start = time.time()
        override, took, chosen = Choose(model, scratch)
        print('%s: chose %s in %.0f s (%.0f s with start-up)' % (model, chosen, took, time.time() - start),
              flush=True)
        runs = {'plain': _PLAIN, 'registered': '', 'choice': override}
        rates = {name: [] for name in runs}
        names = list(runs)
        for round_index in range(args.rounds):
          # Each round starts with another run: the first run of a round was slower by up to 12% here, with the
          # plain and the registered configuration the same (ResNet's).
          for name in names[round_index % len(names):] + names[:round_index % len(names)]:
            text = runs[name]
            rate = StepsPerSecond(model, text, args.steps, scratch)
            if rate is not None:
              rates[name].append(rate)
            print('  %-10s %s steps/s' % (name, '%.3f' % rate if rate else 'failed'), flush=True)
        rows.append((model, chosen, took, rates))
      print('\n| model | choice | chose in s | plain steps/s | registered | choice | choice / plain | '
            'choice / better of the two |')
      print('|---|---|---|---|---|---|---|---|')
      for model, chosen, took, rates in rows:
        median = {k: statistics.median(v) if v else float('nan') for k, v in rates.items()}
        spread = lambda k: '%.3f (%.3f-%.3f)' % (median[k], min(rates[k]), max(rates[k])) if rates[k] else 'failed'
        better = max(median['plain'], median['registered'])
        print('| %s | %s | %.0f | %s | %s | %s | %.2f | %.2f |' % (
            model, chosen, took, spread('plain'), spread('registered'), spread('choice'),
            median['choice'] / median['plain'], median['choice'] / better))
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  if args.write_docs:
    benchmark_page.Write('--pipeline=auto on the registered models, in training', printed.Text(),
                         cpu_kernels.DescribeCpu(), commit=commit)
  return 0


if __name__ == '__main__':
  binary.QuietTool()
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  sys.exit(main())
