"""benchmarks/equal_time_benchmark.py: stopping the tool stops the trainers it started."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tool with its runs replaced by one child that would sleep for 5 minutes: what SIGTERM must stop.
_SCRIPT = textwrap.dedent("""
    import subprocess, sys, time
    import equal_time_benchmark as tool

    def Run(unused_args):
      child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])
      tool._CHILDREN.append(child)
      print('child', child.pid, flush=True)
      time.sleep(300)

    tool.Run = Run
    tool.main(['--data_dir=unused', '--logdir=unused'])
""")


def _Alive(pid):
  """Whether `pid` runs (a zombie, exited but not yet reaped, does not)."""
  try:
    with open('/proc/%d/stat' % pid, encoding='utf-8') as f:
      return f.read().split(')')[-1].split()[0] != 'Z'
  except FileNotFoundError:
    return False


@pytest.mark.slow  # Starts two trainers and stops them: about 5 s.
def test_sigterm_stops_the_trainers_it_started():
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [os.path.join(ROOT, 'benchmarks')] + ([os.environ['PYTHONPATH']] if os.environ.get('PYTHONPATH') else [])))
  tool = subprocess.Popen([sys.executable, '-c', _SCRIPT], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  child = None
  try:
    line = ''
    while not line.startswith('child'):
      line = tool.stdout.readline()
      assert line, 'the tool ended before starting its child'
    child = int(line.split()[1])
    assert _Alive(child)
    tool.send_signal(signal.SIGTERM)
    rest = tool.communicate(timeout=90)[0]
    child_survived = _Alive(child)
  finally:
    if tool.poll() is None:
      tool.kill()
    if child and _Alive(child):  # The test failed: leave no sleeper behind.
      os.kill(child, signal.SIGKILL)
  assert tool.returncode == 128 + signal.SIGTERM, rest
  assert 'Stopped 1 trainer(s) still running' in rest, rest
  assert not child_survived
