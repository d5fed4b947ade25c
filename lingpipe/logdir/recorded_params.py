"""Eval, decode, export and profile of a run use the task params it was trained with.

A run trained with an override (`task.fprop_dtype='bfloat16'`, a changed `task.network.num_micro_batches`) records
it in its params.txt; the model's registered params do not have it. These modes therefore start from the registered
params, take the run's recorded `task.*` values where they differ, then apply the command's own overrides, which
win. What was taken is said in one line. Training settings (`task.train.*`) and the seed are left out: they do not
change what a checkpoint computes.
"""

import ast
import re

from lingpipe.core import errors

_NOT_ADOPTED = ('task.train.', 'task.random_seed')


_KEY = re.compile(r'^[A-Za-z_][\w.\[\]-]*$')


_OPENERS = ('\'', '"', '[', '(', '{')
# What params_text.EncodeValue writes besides Python literals: dtypes, classes, enum members, and a float's repr
# that literal_eval does not read.
_NAMED_VALUE = re.compile(r'^(tf\.\w+|type/[\w.]+/[\w.]+|enum/[\w.]+/[\w.]+/\w+|-?inf|nan)$')


def _Written(value):
  """Whether `value` has a form params_text.EncodeValue writes."""
  if _NAMED_VALUE.match(value):
    return True
  try:
    ast.literal_eval(value)
  except (ValueError, SyntaxError, MemoryError, RecursionError):
    return False
  return True


def Check(text, path):
  """Raises a one-line ConfigError naming the first line of recorded params `text` (from file `path`) that does
  not parse: a line without ' : ' after a param path, or a value lingpipe does not write (an unclosed quote or
  bracket, a stray quote after a number).
  lingpipe writes the file whole, so such a line was edited by hand; read as it is, it made eval call a param
  missing and a resume list the line as a changed param."""
  for number, line in enumerate(text.splitlines(), 1):
    stripped = line.strip()
    if not stripped or stripped.startswith('#'):
      continue
    key, sep, value = line.partition(' : ')
    problem = None
    if not sep or not _KEY.match(key.strip()):
      problem = "expected 'path : value'"
    elif not _Written(value.strip()):
      problem = ('its value does not parse (an unclosed quote or bracket?)' if value.strip()[:1] in _OPENERS
                 else 'its value is not a Python literal, tf.<dtype>, type/... or enum/... (a stray quote?)')
    if problem:
      raise errors.ConfigError(
          '%s line %d does not parse: %r: %s. This file records how the run was trained and lingpipe writes it '
          'whole, so it was edited: restore the line (--mode=inspect prints the model\'s params in this form).' % (
              path, number, stripped[:80], problem))


def Lines(text):
  """{path: value text} of params text 'path : value' lines."""
  lines = {}
  for line in text.splitlines():
    key, sep, value = line.partition(' : ')
    if sep and not line.startswith('#'):
      lines[key.strip()] = value
  return lines


def Adopt(p, recorded_text):
  """Sets in model params `p` the recorded `task.*` values that differ from p's. Returns (adopted 'path : value'
  lines, paths that could not be applied: no longer in the model, or a value it no longer takes)."""
  if not recorded_text:
    return [], []
  current = Lines(p.ToText())
  adopted, skipped = [], []
  for key, value in Lines(recorded_text).items():
    if not key.startswith('task.') or key.startswith(_NOT_ADOPTED) or current.get(key) == value:
      continue
    if key not in current:
      skipped.append(key)
      continue
    try:
      p.FromText('%s : %s' % (key, value))
    except errors.UserError:
      skipped.append(key)
      continue
    adopted.append('%s : %s' % (key, value))
  return adopted, skipped


def Note(p, params_path, adopted, skipped):
  """The line that says what Adopt took from `params_path` and `p` (with the command's overrides applied since)
  still holds, or None when that is nothing and nothing was skipped."""
  current = Lines(p.ToText())
  adopted = [line for line in adopted if current.get(line.split(' : ', 1)[0]) == line.split(' : ', 1)[1]]
  if not adopted and not skipped:
    return None
  parts = []
  if adopted:
    parts.append('Using the run\'s params from %s where they differ from the registered model\'s: %s' % (
        params_path, '; '.join(adopted[:6]) + ('; ...' if len(adopted) > 6 else '')))
  if skipped:
    parts.append('%s params of the run are not in this model (left as registered): %s' % (
        len(skipped), ', '.join(skipped[:4]) + (', ...' if len(skipped) > 4 else '')))
  return '. '.join(parts) + '. Override them to change this.'
