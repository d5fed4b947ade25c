"""BUILD lists every module, tool and test: it must equal what tools/update_build.py generates."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _SourceFiles():
  out = []
  for top in ('lingpipe', 'params', 'tasks', 'tools', 'tests'):
    for root, dirs, files in os.walk(os.path.join(ROOT, top)):
      dirs[:] = [d for d in dirs if not d.startswith(('.', '__'))]
      out += [os.path.relpath(os.path.join(root, f), ROOT) for f in files if f.endswith('.py')]
  return out


def test_every_module_and_test_is_in_build():
  build = open(os.path.join(ROOT, 'BUILD')).read()
  listed = set(re.findall(r'"([^"]+\.py)"', build))
  missing = sorted(set(_SourceFiles()) - listed)
  assert not missing, 'Missing from BUILD (run python tools/update_build.py): %s' % ', '.join(missing)
  tests = [f for f in _SourceFiles() if os.path.basename(f).startswith('test_')]
  for test in tests:
    name = os.path.splitext(os.path.basename(test))[0]
    assert re.search(r'py_test\(\n    name = "%s",' % name, build), 'No py_test for %s in BUILD' % test


def test_build_is_up_to_date():
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'tools', 'update_build.py'), '--check'],
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stderr
