"""`import lingpipe` leaves TensorFlow alone; cpu_kernels.PreferOneDnn() (the binaries' call) turns TensorFlow's oneDNN
kernels on unless the user chose, and the report says what a process got.

Each case runs in a fresh subprocess: TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it loads.
"""

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from lingpipe.core import cpu_kernels

_REPORT = '''
    import os
    from lingpipe.core import cpu_kernels
    print(os.environ.get(cpu_kernels.ENV_VAR), cpu_kernels.OneDnnEnabled(), cpu_kernels.Describe(), sep='|')
    '''


def _Run(prelude, onednn_env=None):
  env = {k: v for k, v in os.environ.items() if k != cpu_kernels.ENV_VAR}
  env['TF_CPP_MIN_LOG_LEVEL'] = '2'
  if onednn_env is not None:
    env[cpu_kernels.ENV_VAR] = onednn_env
  result = subprocess.run([sys.executable, '-c', textwrap.dedent(prelude) + textwrap.dedent(_REPORT)],
                          capture_output=True, text=True, env=env, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  return result.stdout.strip().splitlines()[-1].split('|')


_PREFER = 'from lingpipe.core import cpu_kernels\ncpu_kernels.PreferOneDnn()\nimport lingpipe\nlingpipe.Params'


def test_importing_lingpipe_changes_nothing_and_loads_no_tensorflow():
  result = subprocess.run([sys.executable, '-c', 'import os, sys, lingpipe; print(os.environ.get("%s"), '
                           '"tensorflow" in sys.modules)' % cpu_kernels.ENV_VAR],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != cpu_kernels.ENV_VAR})
  assert result.stdout.split() == ['None', 'False'], result.stderr[-2000:]


@pytest.mark.skipif(platform.machine() not in ('x86_64', 'AMD64'), reason='oneDNN ships in the x86 wheels.')
@pytest.mark.slow
def test_prefer_onednn_turns_it_on_where_the_user_did_not_choose():
  value, enabled, described = _Run(_PREFER)
  assert (value, enabled, described) == ('1', 'True', 'oneDNN on')


@pytest.mark.slow
def test_the_users_choice_is_kept():
  value, enabled, described = _Run(_PREFER, onednn_env='0')
  assert (value, enabled, described) == ('0', 'False', 'oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)')


@pytest.mark.slow
def test_tensorflow_imported_first_keeps_its_own_choice_and_the_report_says_so():
  # Where TensorFlow turns oneDNN on by itself (CPUs with AVX512-VNNI), it is on either way.
  value, enabled, described = _Run('import tensorflow\n' + _PREFER)
  assert value == '1'
  assert (enabled, described) in (('True', 'oneDNN on'),
                                  ('False', 'oneDNN off (TensorFlow was imported before cpu_kernels.PreferOneDnn())'))
