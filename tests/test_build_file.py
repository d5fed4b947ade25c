"""BUILD lists every module, tool and test: it must equal what tools/update_build.py generates."""

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _SourceFiles(tops=('lingpipe', 'params', 'tasks', 'tools', 'benchmarks', 'tests')):
  out = []
  for top in tops:
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


def test_build_lists_every_third_party_package_the_code_imports():
  import update_build  # pylint: disable=g-import-not-at-top
  local = {os.path.splitext(os.path.basename(f))[0] for f in _SourceFiles()} | {'lingpipe'}
  imported = set()
  for path in _SourceFiles(('lingpipe', 'params', 'tasks', 'tools', 'benchmarks')):
    for node in ast.walk(ast.parse(open(os.path.join(ROOT, path), encoding='utf-8').read())):
      if isinstance(node, ast.Import):
        imported |= {alias.name.split('.')[0] for alias in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        imported.add(node.module.split('.')[0])
  third_party = imported - set(sys.stdlib_module_names) - local
  assert third_party <= set(update_build.IMPORTED_PACKAGES), sorted(third_party - set(update_build.IMPORTED_PACKAGES))
  build = open(os.path.join(ROOT, 'BUILD')).read()
  for package in update_build.IMPORTED_PACKAGES.values():
    assert 'requirement("%s")' % package in build, package
