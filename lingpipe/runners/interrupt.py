"""Ctrl-C that is never lost, and SIGTERM that saves: each reported in one line.

Python turns SIGINT into a KeyboardInterrupt raised in whatever Python code the main thread runs next. In a
TensorFlow program that is sometimes a finalizer run by the garbage collector (CI once caught TensorFlow's
`Executor.__del__`), where Python swallows it: it only prints 'Exception ignored in ...' and a traceback (through
`sys.unraisablehook`) and goes on: the trainer then goes on training, now and then, under load.

`Catching()` keeps Python's behaviour (the first Ctrl-C still raises at once, so a long trace or input read stops
too) and also remembers that it came; loops call `Check()` at their safe points (the train loop: each step), which
raises it again if it was swallowed. Within `Catching()`, Python's report of a swallowed Ctrl-C is dropped, since
`Check()` raises it again (the report turned the trainer's one-line 'interrupted' message into nine lines); any
other unraisable exception is reported as before.

SIGTERM is what cluster schedulers send some seconds before SIGKILL. Training finishes its step and saves
(`SavingOnTerminate`); every other mode stops with one line (`StoppingOnTerminate`). In both, a timer ends the
process if the main thread does not get back to Python in time.
"""

import contextlib
import os
import signal
import sys
import threading

_REQUESTED = threading.Event()


def _Handler(signum, frame):
  del signum, frame
  _REQUESTED.set()
  raise KeyboardInterrupt


@contextlib.contextmanager
def Catching():
  """Within it, a Ctrl-C raises KeyboardInterrupt and is remembered for Check(), and a finalizer that swallows it
  prints nothing. Off the main thread, or when SIGINT is not Python's default handler (ignored by a parent such as
  nohup, or handled by the caller), it changes nothing."""
  if (threading.current_thread() is not threading.main_thread()
      or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
    yield
    return
  _REQUESTED.clear()
  previous_hook = sys.unraisablehook

  def _DropSwallowedCtrlC(unraisable):
    if not (_REQUESTED.is_set() and issubclass(unraisable.exc_type, KeyboardInterrupt)):
      previous_hook(unraisable)

  signal.signal(signal.SIGINT, _Handler)
  sys.unraisablehook = _DropSwallowedCtrlC
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.unraisablehook = previous_hook
    _REQUESTED.clear()


def Check():
  """Raises KeyboardInterrupt if a Ctrl-C came within Catching(), even one whose first raise was swallowed."""
  if _REQUESTED.is_set():
    raise KeyboardInterrupt


# -- SIGTERM: what cluster schedulers (Slurm, Kubernetes, preemptible VMs) send some seconds before SIGKILL --------
class Terminated(Exception):
  """The process was asked to stop by SIGTERM; its message says what was saved."""


class Interrupted(KeyboardInterrupt):
  """A Ctrl-C, with where the same command resumes as its message."""


_TERMINATE = threading.Event()
_STATE = {'unsaved': False}


def SetUnsaved(unsaved):
  """The loop says whether it has steps that no checkpoint holds yet (a SIGTERM then waits for a save)."""
  _STATE['unsaved'] = unsaved


def TerminationRequested():
  return _TERMINATE.is_set()


_STOP_GRACE_S = 10.0


def _ExitUnlessStopped():
  """From a timer thread, when the main thread did not return to Python to stop (blocked in a native call)."""
  print('lingpipe: terminated (SIGTERM); exiting without waiting for the call in progress.', file=sys.stderr,
        flush=True)
  os._exit(128 + signal.SIGTERM)  # pylint: disable=protected-access


@contextlib.contextmanager
def _OnSigterm(on_signal, grace_s, on_timeout):
  """Within it, SIGTERM calls on_signal(start_timer) in the main thread; start_timer() arms a timer that calls
  on_timeout() from another thread `grace_s` later unless the block has ended."""
  timer = threading.Timer(grace_s, on_timeout)
  timer.daemon = True

  def _Handler(signum, frame):
    del signum, frame
    on_signal(lambda: timer.is_alive() or timer.finished.is_set() or timer.start())

  previous = signal.signal(signal.SIGTERM, _Handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)
    timer.cancel()


@contextlib.contextmanager
def StoppingOnTerminate():
  """Within it, SIGTERM raises Terminated (one line, exit 143) instead of ending the process without a word; what
  was being written is left as it was, since every write is atomic. If the main thread is blocked in a native
  call for _STOP_GRACE_S, a timer ends the process. Training overrides it (SavingOnTerminate). Changes nothing off
  the main thread or where SIGTERM already has a handler (lingpipe-worker's)."""
  if (threading.current_thread() is not threading.main_thread()
      or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
    yield
    return

  def _Stop(start_timer):
    start_timer()
    raise Terminated('terminated (SIGTERM); anything it was writing was left as it was.')

  with _OnSigterm(_Stop, _STOP_GRACE_S, _ExitUnlessStopped):
    yield


@contextlib.contextmanager
def SavingOnTerminate(grace_s, on_timeout, describe_stop):
  """Within it, SIGTERM asks the training loop to finish its step, save and stop (it polls TerminationRequested()
  at each step); with no unsaved steps it raises Terminated(describe_stop()) at once. If the process still runs
  `grace_s` seconds after the signal (a step or a save that does not end), on_timeout() is called from a timer
  thread: it says so and ends the process, whose last complete checkpoint stays as it was. Off the main thread it
  changes nothing."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def _AskToSave(start_timer):
    _TERMINATE.set()
    start_timer()
    if not _STATE['unsaved']:
      raise Terminated(describe_stop())

  _TERMINATE.clear()
  try:
    with _OnSigterm(_AskToSave, grace_s, on_timeout):
      yield
  finally:
    _TERMINATE.clear()
    _STATE['unsaved'] = False
