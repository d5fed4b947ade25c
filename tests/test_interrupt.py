"""runners/interrupt.py: a Ctrl-C that library code swallows still stops the loop at its next Check()."""

import signal
import sys
import time

import pytest

from lingpipe.runners import interrupt


def _SwallowingCtrlC():
  """What a finalizer or a library's cleanup path does with an exception it meets."""
  try:
    signal.raise_signal(signal.SIGINT)  # To this thread, so the handler runs here at the next bytecode.
    deadline = time.time() + 10
    while time.time() < deadline:
      time.sleep(0.01)
  except KeyboardInterrupt:
    return True
  return False


class _CtrlCInFinalizer:
  """Ctrl-C arrives while the garbage collector runs this finalizer (CI once met it in TensorFlow's
  `Executor.__del__`): Python reports the KeyboardInterrupt as unraisable and goes on."""

  def __del__(self):
    signal.raise_signal(signal.SIGINT)
    time.sleep(10)  # Never ends: the handler raises at the next bytecode.


class _ErrorInFinalizer:

  def __del__(self):
    raise RuntimeError('a finalizer bug')


@pytest.fixture
def unraisable(monkeypatch):
  """What Python would print as 'Exception ignored in ...', recorded instead."""
  reported = []
  monkeypatch.setattr(sys, 'unraisablehook', reported.append)
  return reported


@pytest.fixture
def python_sigint():
  """SIGINT as Python sets it up in a terminal. A suite started in the background of a non-interactive shell (as CI
  may do) inherits it ignored, and Python then leaves it ignored."""
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  yield
  signal.signal(signal.SIGINT, previous)


pytestmark = pytest.mark.usefixtures('python_sigint')


def test_a_swallowed_ctrl_c_is_raised_again_at_the_next_check():
  with interrupt.Catching():
    interrupt.Check()  # Nothing came yet.
    assert _SwallowingCtrlC()  # Python's behaviour is kept: the first raise happens at once.
    with pytest.raises(KeyboardInterrupt):
      interrupt.Check()
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  interrupt.Check()  # Outside, a past Ctrl-C is forgotten.


def test_without_catching_python_alone_raises_and_check_does_not():
  assert _SwallowingCtrlC()
  interrupt.Check()


def test_an_ignored_sigint_stays_ignored():
  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    with interrupt.Catching():
      assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
  finally:
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_swallowed_by_a_finalizer_is_not_printed_and_still_stops(unraisable):
  with interrupt.Catching():
    _CtrlCInFinalizer()  # Collected at once: nothing refers to it.
    assert not unraisable  # No 'Exception ignored' traceback before the one-line message.
    with pytest.raises(KeyboardInterrupt):
      interrupt.Check()
  assert sys.unraisablehook == unraisable.append  # pylint: disable=comparison-with-callable


def test_other_errors_in_finalizers_are_still_reported(unraisable):
  with interrupt.Catching():
    _ErrorInFinalizer()
    assert [u.exc_type for u in unraisable] == [RuntimeError]
    _CtrlCInFinalizer()
    _ErrorInFinalizer()
    assert [u.exc_type for u in unraisable] == [RuntimeError, RuntimeError]
  _CtrlCInFinalizer()  # Outside, Python's own report is kept.
  assert [u.exc_type for u in unraisable] == [RuntimeError, RuntimeError, KeyboardInterrupt]


def test_sigterm_with_unsaved_steps_asks_the_loop_to_save_and_a_stuck_one_times_out():
  timed_out = []
  with interrupt.SavingOnTerminate(0.3, lambda: timed_out.append(time.time()), lambda: 'unused'):
    interrupt.SetUnsaved(True)
    sent = time.time()
    signal.raise_signal(signal.SIGTERM)  # Not raised here: the loop saves at its next step.
    assert interrupt.TerminationRequested()
    deadline = time.time() + 10
    while not timed_out and time.time() < deadline:
      time.sleep(0.01)
  assert timed_out and 0.25 < timed_out[0] - sent < 5  # The step "never ended": on_timeout after the grace.
  assert not interrupt.TerminationRequested() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigterm_with_nothing_unsaved_stops_at_once():
  with pytest.raises(interrupt.Terminated, match='^nothing to save$'):
    with interrupt.SavingOnTerminate(60, lambda: pytest.fail('no grace period is needed'), lambda: 'nothing to save'):
      interrupt.SetUnsaved(False)
      signal.raise_signal(signal.SIGTERM)
      time.sleep(10)


def test_sigterm_outside_training_is_one_line_not_silence():
  with pytest.raises(interrupt.Terminated, match='terminated'):
    with interrupt.StoppingOnTerminate():
      signal.raise_signal(signal.SIGTERM)
      time.sleep(10)
  assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
