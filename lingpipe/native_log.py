"""Keeps TensorFlow's and gRPC's native log lines out of the user's terminal.

TensorFlow 2.21 and gRPC write absl-style records straight to file descriptor 2 ('I0000 00:00:1795379001.57 8318
port.cc:153] oneDNN custom operations are on...', 'W0000 ... local_rendezvous.cc:412] Local rendezvous is aborting
...', plus continuation lines). Some come before TF_CPP_MIN_LOG_LEVEL is honoured (the oneDNN notice prints at every
level, measured), others (gRPC) ignore it, and Python's own handlers print the same format. Two tools:

  - `ImportTensorFlow()`: the library's import (lingpipe/__init__.py) captures fd 2 while TensorFlow loads and replays
    all but the start-up notices, so any program importing lingpipe starts quietly.
  - `Filter()`: the binaries (lingpipe-train, lingpipe-worker; `IsQuietBinary`) route fd 2 through a filter thread
    from before TensorFlow loads to the end of the run, unless --verbose: INFO, WARNING and ERROR records are
    dropped, FATAL records and all other text pass. Python's
    sys.stderr is pointed at the terminal directly, so lingpipe's messages and Python tracebacks never go through
    the filter and a user error is the last line the user sees. At exit, native teardown writes go to /dev/null
    (`_Filter.Close`).

A record's continuation lines are the lines that follow it in the same read of the pipe (a native record is written
with one call). TF_CPP_MIN_LOG_LEVEL=0 turns both off.
"""

import atexit
import os
import re
import sys
import tempfile
import threading

_RECORD = re.compile(rb'^([IWEF])\d{4} [\d:.]+ +\d+ [^\]\s]+\] ')
_BANNER = b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR'
_STARTUP_NOTICES = (b'oneDNN custom operations are', b'This TensorFlow binary is optimized',
                    b'To enable the following instructions:')
_ACTIVE = []  # The running _Filter, if any.


def _Verbose():
  return os.environ.get('TF_CPP_MIN_LOG_LEVEL', '') == '0'


def KeptLines(lines, drop_levels=b'IWE', dropping=False):
  """The lines to keep of one read of the native stream: records of `drop_levels` and the lines after them
  (continuations) are dropped; other records (FATAL) end the dropping. Returns (kept lines, dropping at the end)."""
  kept = []
  for line in lines:
    record = _RECORD.match(line)
    if record:
      dropping = record.group(1) in drop_levels
    elif line.startswith(_BANNER):
      dropping = True
    if not dropping:
      kept.append(line)
  return kept, dropping


def _StartupNoise(line):
  record = _RECORD.match(line)
  text = line[record.end():] if record else line
  return line.startswith(_BANNER) or (
      (record is None or record.group(1) == b'I') and any(text.startswith(n) for n in _STARTUP_NOTICES))


BINARIES = ('lingpipe-train', 'lingpipe-worker')


def VerboseRequested(argv):
  """Whether the command line argv asks for --verbose (before absl parses it)."""
  return any(a in ('--verbose', '-verbose') or re.match(r'^--?verbose=(true|t|1|yes|y)$', a, re.I)
             for a in argv[1:])


def IsBinary(argv):
  """Whether argv is a lingpipe console script's (lingpipe-train, lingpipe-worker)."""
  return bool(argv) and os.path.basename(argv[0]) in BINARIES


def IsQuietBinary(argv):
  """Whether argv is a lingpipe console script run without --verbose (it filters fd 2 from its first line)."""
  return IsBinary(argv) and not VerboseRequested(argv)


def ImportTensorFlow():
  """Imports TensorFlow with its start-up notices removed from fd 2 (the rest is replayed)."""
  if 'tensorflow' in sys.modules or _Verbose() or _ACTIVE:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    return
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError):  # No usable fd 2 (embedded interpreters): import plainly.
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    return
  with tempfile.TemporaryFile(mode='w+b') as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import,redefined-outer-name
    finally:
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      kept = [line for line in captured.read().splitlines(keepends=True) if not _StartupNoise(line)]
      if kept:
        os.write(2, b''.join(kept))


class _Filter:
  """fd 2 -> pipe -> a thread that writes the kept lines to the terminal (a dup of the original fd 2)."""

  def __init__(self):
    sys.stderr.flush()
    self.terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    self.stderr = sys.stderr
    sys.stderr = open(os.dup(self.terminal), 'w', buffering=1, encoding='utf-8', errors='backslashreplace')
    self.thread = threading.Thread(target=self._Pump, args=(read_end,), name='native_log', daemon=True)
    self.thread.start()

  def _Pump(self, read_end):
    """Reads the pipe to its end whatever happens: if this thread stopped, writers to fd 2 would block forever."""
    partial, dropping = b'', False
    while True:
      try:
        chunk = os.read(read_end, 1 << 16)
      except InterruptedError:
        continue
      if not chunk:
        break
      # A new read starts a new write unless it finishes a line the last one began.
      *lines, partial_next = (partial + chunk).split(b'\n')
      kept, dropping = KeptLines([l + b'\n' for l in lines], dropping=dropping and bool(partial))
      partial = partial_next
      self._Write(b''.join(kept))
    if partial:  # A last line without its newline.
      self._Write(b''.join(KeptLines([partial], dropping=dropping)[0]))
    os.close(read_end)

  def _Write(self, data):
    try:
      while data:
        data = data[os.write(self.terminal, data):]
    except OSError:  # The terminal is gone (EPIPE): drop the text, keep draining.
      pass

  def Close(self, at_exit=False):
    """Ends the filter once it has written what it kept: fd 2 and sys.stderr go back to the terminal. At the
    interpreter's exit fd 2 goes to /dev/null instead and sys.stderr stays on the terminal: what writes to fd 2
    after that is native teardown (a remote context's 'Failed to register function remotely' after a worker died,
    measured), which no thread is left to filter; a crash there still shows in the exit status."""
    sys.stderr.flush()
    target = os.open(os.devnull, os.O_WRONLY) if at_exit else self.terminal
    os.dup2(target, 2)  # Closes the pipe's last write end: the thread reads to its end and exits.
    self.thread.join(timeout=5)
    if at_exit:
      os.close(target)
      return
    sys.stderr.close()
    sys.stderr = self.stderr
    os.close(self.terminal)


def Filter():
  """Filters fd 2 until Close() or exit (see the module docstring). A no-op when already on, when
  TF_CPP_MIN_LOG_LEVEL=0, or without a usable fd 2."""
  if _ACTIVE or _Verbose():
    return
  try:
    _ACTIVE.append(_Filter())
  except (OSError, ValueError):
    return
  atexit.register(Close, at_exit=True)


def IsFiltering():
  return bool(_ACTIVE)


def TerminalFd():
  """The file descriptor of this process's own stderr (the terminal or file it was started with, not the filter's
  pipe): what a child process that may outlive this one should write its stderr to."""
  return _ACTIVE[0].terminal if _ACTIVE else 2


def Close(at_exit=False):
  """Ends Filter(); call it before os._exit, which skips atexit (see _Filter.Close for `at_exit`)."""
  if _ACTIVE:
    _ACTIVE.pop().Close(at_exit)
