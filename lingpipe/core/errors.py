"""Errors a user can cause, as opposed to bugs in lingpipe.

Every error raised for bad user input derives from `UserError` *and* from the built-in exception a Python
programmer would expect (`ValueError`, `AttributeError`, `TypeError`, `FileNotFoundError`), so callers can catch
either. The trainer prints a `UserError` as one readable line and exits non-zero; anything else is a bug and keeps
its traceback.
"""

import difflib


class UserError(Exception):
  """Base class of errors caused by the user's configuration, data or command line."""


class ConfigError(UserError, ValueError):
  """An impossible or inconsistent configuration (bad value, wrong type, mismatched shapes)."""


class UnknownParamError(UserError, AttributeError):
  """A Params key that does not exist."""


class FrozenParamsError(UserError, TypeError):
  """An attempt to change Params after `Freeze()`."""


class ShapeError(UserError, ValueError):
  """A layer was given an input of the wrong rank or depth."""


class DataError(UserError, ValueError):
  """Missing or malformed input data."""


class DataFileNotFoundError(UserError, FileNotFoundError):
  """An input file that does not exist."""


class CheckpointError(UserError, ValueError):
  """A checkpoint that cannot be used: corrupt, truncated, or of a different model."""


class NonFiniteLossError(UserError, FloatingPointError):
  """Training produced a NaN or Inf loss or gradient."""


def NearMatches(name, candidates, n=5, cutoff=0.6):
  """Returns up to `n` entries of `candidates` that look like `name`, best first."""
  candidates = list(candidates)
  matches = difflib.get_close_matches(name, candidates, n=n, cutoff=cutoff)
  # Also suggest candidates that contain the name or whose last dotted component matches it, which difflib
  # misses for short names against long dotted keys ('Mlp' vs 'synthetic.Mlp').
  lower = name.lower()
  for c in candidates:
    if c not in matches and (lower in c.lower() or c.lower().rsplit('.', 1)[-1] == lower.rsplit('.', 1)[-1]):
      matches.append(c)
  return matches[:n]


def DidYouMean(name, candidates):
  """A suffix for an error message: ' Did you mean: a, b?' or '' when nothing is close."""
  matches = NearMatches(name, candidates)
  if not matches:
    return ''
  return ' Did you mean: %s?' % ', '.join(matches)


class OutOfMemoryError(UserError, MemoryError):
  """A device or process ran out of its memory (TensorFlow's ResourceExhausted, or a budget the kernel enforces)."""


class ClusterError(UserError, ConnectionError):
  """A worker that is unreachable, died, hangs, or was started for another cluster."""


class DiskFullError(UserError, OSError):
  """A file could not be written because its filesystem is full (nothing was lost)."""


class FileSystemError(UserError, OSError):
  """A path that cannot be read or written: read-only, missing permission, a file where a folder is needed."""


class LogdirBusyError(UserError, RuntimeError):
  """Another process is training in the same logdir."""
