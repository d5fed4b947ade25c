"""tools/ holds what users run, each with a main and --help; benchmarks/ holds the benchmarks and their helpers;
no script puts the checkout on sys.path (the README installs lingpipe with pip -e), and each sets up its process
with the binaries' call (lingpipe/process_setup.py) where it sets one up at all."""

import ast
import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TOOLS = sorted(glob.glob(os.path.join(ROOT, 'tools', '*.py')))
_SCRIPTS = _TOOLS + sorted(glob.glob(os.path.join(ROOT, 'benchmarks', '**', '*.py'), recursive=True))


def _HasMain(tree):
  return any(isinstance(node, ast.If) and 'main' in ast.unparse(node.test) for node in tree.body)


def test_every_tool_has_a_main_and_a_parser():
  assert _TOOLS
  for path in _TOOLS:
    source = open(path, encoding='utf-8').read()
    assert _HasMain(ast.parse(source)), '%s has no `if __name__ == \'__main__\'`' % path
    assert 'argparse' in source or 'absl import flags' in source, '%s parses no flags (--help)' % path


def test_no_script_edits_sys_path_or_sets_up_the_process_by_hand():
  for path in _SCRIPTS:
    source = open(path, encoding='utf-8').read()
    assert 'sys.path.insert' not in source and 'sys.path.append' not in source, path
    for call in ('PreferOneDnn()', 'DisableFunctionSpecialization()'):
      assert call not in source, '%s calls %s: use process_setup.SetUpProcess()' % (path, call)


def test_benchmark_helpers_are_not_in_tools():
  helpers = {'workloads.py', 'benchmark_page.py', 'precision_section.py', 'schedule_section.py'}
  assert not helpers & {os.path.basename(p) for p in _TOOLS}


@pytest.mark.slow
@pytest.mark.parametrize('path', _TOOLS, ids=os.path.basename)
def test_help_runs_from_anywhere(path, tmp_path):
  """From another folder, so that nothing but the installed package makes `import lingpipe` work."""
  result = subprocess.run([sys.executable, path, '--help'], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, check=False)
  absl_help = 'Try --helpfull' in result.stdout  # absl's --help exits with 1 by design (lingpipe-train's too).
  assert result.returncode == 0 or (result.returncode == 1 and absl_help), result.stderr[-2000:]
  assert 'usage' in result.stdout.lower() or absl_help, result.stdout[:500]
