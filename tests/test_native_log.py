"""The binaries' terminal: TensorFlow's native log lines filtered out, our lines last, --help that helps."""

import os
import subprocess
import sys
import textwrap

import pytest

from lingpipe import native_log

# Records as TensorFlow 2.21 and gRPC wrote them here (a dead worker, start-up), with their continuation lines.
_RECORDS = [
    b'W0000 00:00:1795379001.572387    8318 local_rendezvous.cc:412] Local rendezvous is aborting with status\n',
    b'\t [[{{node GroupCrossDeviceControlEdges_0/NoOp/_369}}]]\n',
    b'E0000 00:00:1795379001.592672    8385 context.cc:873] Failed to register function remotely\n',
    b'This could happen if the remote target has been disconnected from the client.\n',
    b'I0000 00:00:1795378384.884405    5890 cpu_feature_guard.cc:227] This TensorFlow binary is optimized\n',
    b'To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow.\n',
    b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n',
    b'W1122 20:23:14.728096 139830095465344 polymorphic_function.py:157] 5 out of the last 5 calls\n',
]


def test_records_and_their_continuations_are_dropped_fatal_records_kept():
  fatal = b'F0000 00:00:1795379001.1 8318 tensor.cc:12] Check failed: 1 == 2\n'
  kept, dropping = native_log.KeptLines(_RECORDS + [fatal, b'*** Begin stack trace ***\n'])
  assert kept == [fatal, b'*** Begin stack trace ***\n'] and not dropping
  assert native_log.KeptLines([b'plain text\n'] + _RECORDS[:2])[0] == [b'plain text\n']
  assert native_log.KeptLines([b'a continuation?\n'], dropping=True)[0] == []


def test_startup_notices_are_recognised_and_other_warnings_are_not():
  assert all(native_log._StartupNoise(line) for line in (_RECORDS[4], _RECORDS[5], _RECORDS[6]))
  assert not native_log._StartupNoise(b'W0000 00:00:1.0 1 cuda_dso_loader.cc:1] Could not load libcudart\n')


def _Run(code, *args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='1')  # TensorFlow's warnings and errors on.
  return subprocess.run([sys.executable, '-c', textwrap.dedent(code)] + list(args), capture_output=True, text=True,
                        env=env, timeout=120)


_NATIVE_LINES = '''
    import sys
    from lingpipe import native_log  # Imports TensorFlow without its start-up notices.
    if sys.argv[1] == 'filter':
      native_log.Filter()
    import tensorflow as tf
    tf.raw_ops.PrintV2(input='native warning', output_stream='log(warning)')
    tf.raw_ops.PrintV2(input='native error', output_stream='log(error)')
    print('lingpipe-train: error: ours', file=sys.stderr)
    '''


@pytest.mark.slow
def test_the_filter_keeps_native_records_off_the_terminal_and_our_line_last():
  plain = _Run(_NATIVE_LINES, 'plain')
  assert 'native warning' in plain.stderr and 'native error' in plain.stderr  # The control: they do print.
  filtered = _Run(_NATIVE_LINES, 'filter')
  assert filtered.returncode == 0, filtered.stderr
  assert filtered.stderr == 'lingpipe-train: error: ours\n'


_TEARDOWN = """
import atexit, os, sys
from lingpipe import native_log

def Teardown():
  os.write(2, b'E0000 00:00:1795452804.112767 24501 context.cc:873] Failed to register function remotely\\n')
  print('python, last', file=sys.stderr)

atexit.register(Teardown)  # Registered before the filter's own handler, so it runs after it, as teardown does.
native_log.Filter()
print('lingpipe-train: error: ours', file=sys.stderr)
"""


def test_native_records_at_teardown_stay_off_the_terminal():
  result = _Run(_TEARDOWN)
  assert result.returncode == 0 and result.stderr == 'lingpipe-train: error: ours\npython, last\n', result.stderr


def _Binary(name):
  path = os.path.join(os.path.dirname(sys.executable), name)
  return [path] if os.path.exists(path) else [sys.executable, '-m', 'lingpipe.' + name.split('-')[1].replace(
      'train', 'trainer')]


@pytest.mark.slow
def test_help_shows_the_docstring_and_our_flags():
  for name, flag in (('lingpipe-train', '--model_params_override'), ('lingpipe-worker', '--cpu_devices')):
    result = subprocess.run(_Binary(name) + ['--help'], capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith(name + ': '), result.stdout[:300]
    assert flag in result.stdout and '--[no]verbose' in result.stdout


@pytest.mark.slow
def test_a_user_error_is_the_only_line():
  result = subprocess.run(_Binary('lingpipe-train') + ['--model=synthetic.Mlpp', '--logdir=/nonexistent/x'],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='1'))
  assert result.returncode == 1
  assert result.stdout == ''
  assert result.stderr.startswith("lingpipe-train: error: Unknown model 'synthetic.Mlpp'.")
  assert result.stderr.count('\n') == 1, result.stderr


@pytest.mark.slow
def test_a_reader_that_goes_away_stops_the_binary_quietly():
  process = subprocess.Popen(_Binary('lingpipe-train') + ['--mode=list'], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
  process.stdout.close()  # As `lingpipe-train ... | head -1` once head has its line.
  _, err = process.communicate(timeout=120)
  assert process.returncode == 141 and err == b'', err.decode()[-2000:]
