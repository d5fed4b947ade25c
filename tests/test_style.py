"""The code's shape the style guide asks for and a linter here would not check: lines of at most 120 columns."""

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_python_line_over_120_columns():
  paths = ['setup.py'] + [p for folder in ('lingpipe', 'params', 'tools', 'benchmarks', 'tests')
                          for p in glob.glob(folder + '/**/*.py', root_dir=ROOT, recursive=True)]
  long = ['%s:%d (%d columns)' % (path, number, len(line.rstrip('\n')))
          for path in paths
          for number, line in enumerate(open(os.path.join(ROOT, path), encoding='utf-8'), 1)
          if len(line.rstrip('\n')) > 120]
  assert not long, '\n'.join(long)
