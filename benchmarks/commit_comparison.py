r"""Step times and time to first step at two commits, side by side: did a change leave them alone?

    python benchmarks/commit_comparison.py --before=c1554b3 --after=HEAD --rounds=2

Checks each commit out into a git worktree of its own (in a temporary folder; it removes only what it made), runs
pipeline_benchmark.py's schedule table and time-to-first-step sections there, alternating the two commits for
--rounds rounds so that a machine that slows down or speeds up weighs on both alike, and prints each row's step
time and first step at both commits and their ratio (after over before, the median over the rounds).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# Where pipeline_benchmark.py lives in a commit: benchmarks/ since the tools/ split, tools/ before it.
_BENCHMARK_PATHS = ('benchmarks/pipeline_benchmark.py', 'tools/pipeline_benchmark.py')
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _Args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--before', required=True, help='The commit to compare against (any git revision).')
  parser.add_argument('--after', default='HEAD', help='The commit compared (default HEAD).')
  parser.add_argument('--rounds', type=int, default=2, help='Runs of each commit, alternating.')
  parser.add_argument('--sections', default='schedules,ttfs', help="pipeline_benchmark.py's --sections.")
  parser.add_argument('--write_docs', action='store_true', help='Write the table into docs/benchmarks.md.')
  return parser.parse_args(argv)


def _Git(*args, repo=_REPO):
  return subprocess.run(['git', '-C', repo] + list(args), check=True, capture_output=True, text=True).stdout.strip()


def CleanUp(folder, worktrees, written, repo=_REPO):
  """Removes what this tool made and nothing else: the files it `written`, the `worktrees` it added
  (git refuses one holding a file git does not ignore, and it is kept), then `folder` if empty.
  Returns a line for each thing kept."""
  kept = []
  for path in written:
    if os.path.exists(path):
      os.remove(path)
  for path in worktrees:
    try:
      _Git('worktree', 'remove', path, repo=repo)
    except subprocess.CalledProcessError as e:
      kept.append('kept the worktree %s: %s' % (path, e.stderr.strip().splitlines()[-1] if e.stderr else e))
  try:
    os.rmdir(folder)
  except OSError as e:
    kept.append('kept %s: %s' % (folder, e.strerror))
  return kept


def _Run(worktree, sections, out):
  """Runs the commit's pipeline benchmark in `worktree`, its own lingpipe first on the path; returns its JSON."""
  script = next((p for p in _BENCHMARK_PATHS if os.path.exists(os.path.join(worktree, p))), None)
  if script is None:
    sys.exit('commit_comparison: %s has none of %s.' % (worktree, ', '.join(_BENCHMARK_PATHS)))
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([worktree, os.path.join(worktree, 'benchmarks')]))
  subprocess.run([sys.executable, script, '--sections=' + sections, '--out=' + out], cwd=worktree, env=env,
                 check=True, stdout=subprocess.DEVNULL)
  with open(out) as f:
    return json.load(f)


def Rows(results):
  """{row name: seconds} of one pipeline_benchmark JSON: each schedule row's step time, each first step."""
  rows = {}
  for model, table in sorted(results.get('schedules', {}).items()):
    for key, row in sorted(table.items()):
      rows['step  %s, %s' % (model.split(', batch')[0], key)] = row['step_s']
  for remat, by_m in sorted(results.get('time_to_first_step', {}).items()):
    for m, row in sorted(by_m.items(), key=lambda kv: int(kv[0])):
      rows['first step  Transformer K=4, M=%s, %s' % (m, remat)] = row['total_s']
  return rows


def Table(before, after):
  """Lines: each row's median seconds at both commits and after/before. `before`, `after`: lists of Rows."""
  names = [n for n in before[0] if all(n in r for r in before + after)]
  lines = ['%-64s %10s %10s %8s' % ('row', 'before s', 'after s', 'ratio')]
  ratios = []
  for name in names:
    b, a = statistics.median(r[name] for r in before), statistics.median(r[name] for r in after)
    ratios.append(a / b)
    lines.append('%-64s %10.3f %10.3f %8.2f' % (name, b, a, a / b))
  steps = [r for n, r in zip(names, ratios) if n.startswith('step')]
  firsts = [r for n, r in zip(names, ratios) if n.startswith('first')]
  for label, values in (('step times', steps), ('first steps', firsts)):
    if values:
      lines.append('%s: median ratio %.2f (range %.2f-%.2f, %d rows)' % (
          label, statistics.median(values), min(values), max(values), len(values)))
  return lines


def main(args):
  commits = {'before': _Git('rev-parse', '--short', args.before), 'after': _Git('rev-parse', '--short', args.after)}
  folder = tempfile.mkdtemp(prefix='commit_comparison_')
  worktrees, written = [], []
  try:
    for which, commit in commits.items():
      path = os.path.join(folder, which)
      _Git('worktree', 'add', '--detach', '-q', path, commit)
      worktrees.append(path)
    runs = {'before': [], 'after': []}
    for r in range(args.rounds):
      for which in ('before', 'after'):
        print('round %d of %d: %s (%s)' % (r + 1, args.rounds, which, commits[which]), flush=True)
        written.append(os.path.join(folder, '%s_%d.json' % (which, r)))
        results = _Run(os.path.join(folder, which), args.sections, written[-1])
        runs[which].append(Rows(results))
    cpu = results.get('cpu', 'unknown')
    print('CPU: %s' % cpu)
    print('before %s, after %s; medians of %d alternating runs each' % (commits['before'], commits['after'],
                                                                        args.rounds))
    print('\n'.join(Table(runs['before'], runs['after'])))
    return cpu
  finally:
    for line in CleanUp(folder, worktrees, written):
      print('commit_comparison: %s' % line)


if __name__ == '__main__':
  import benchmark_page  # pylint: disable=g-import-not-at-top
  ARGS = _Args(sys.argv[1:])
  with benchmark_page.Recording() as recording:
    cpu = main(ARGS)
  if ARGS.write_docs:
    benchmark_page.Write('Step times at two commits', recording.Text(), cpu)
