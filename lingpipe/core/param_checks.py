"""What a param allows, declared where it is defined: `p.Define('batch_size', 32, '...', check=param_checks.Int(1))`.

A check is called with every new value (`Define`'s default, attribute sets, `Set`, text overrides) and returns None
when the value is allowed, else a phrase saying what is ('an int >= 1'), which hyperparams turns into one line
naming the param and the value. So None, a negative rate or a zero interval is refused when it is set, before a
run writes anything.
"""

import math
import numbers
import re

import tensorflow as tf

from lingpipe.core import errors


class Check:
  """A predicate on values with the phrase that describes what it allows."""

  def __init__(self, allows, description, normalize=None):
    self._allows, self.description, self._normalize = allows, description, normalize

  def __call__(self, value):
    try:
      ok = self._allows(value)
    except (TypeError, ValueError, re.error):
      ok = False
    return None if ok else self.description

  def Normalize(self, value):
    """The form an allowed `value` is stored in (itself, unless the check converts, as dtype names to dtypes)."""
    return self._normalize(value) if self._normalize else value


def _IsInt(value):
  return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _IsNumber(value):
  """A finite real: NaN and +-inf (a literal such as 1e400 parses as inf) are no setting."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _Bounds(low, high, low_open):
  parts = []
  if low is not None:
    parts.append('%s %s' % ('>' if low_open else '>=', low))
  if high is not None:
    parts.append('<= %s' % high)
  return ' and '.join(parts)


def Int(low=None, high=None):
  """An int (not a bool) in [low, high]."""
  bounds = _Bounds(low, high, False)
  return Check(lambda v: _IsInt(v) and (low is None or v >= low) and (high is None or v <= high),
               'an int' + (' ' + bounds if bounds else ''))


def Float(low=None, high=None, low_open=False):
  """A real number (an int is fine) in [low, high], or (low, high] when `low_open`."""
  bounds = _Bounds(low, high, low_open)

  def Allows(v):
    if not _IsNumber(v):
      return False
    if low is not None and (v <= low if low_open else v < low):
      return False
    return high is None or v <= high

  return Check(Allows, 'a finite number' + (' ' + bounds if bounds else ''))


def Positive():
  """A number > 0."""
  return Float(0, low_open=True)


def Fraction(high_open=True):
  """A number in [0, 1) (a decay or momentum), or [0, 1] when not `high_open`."""
  return Check(lambda v: _IsNumber(v) and 0 <= v and (v < 1 if high_open else v <= 1),
               'a number in [0, 1%s' % (')' if high_open else ']'))


def OrNone(check):
  """None, or what `check` allows."""
  return Check(lambda v: v is None or check(v) is None, 'None or %s' % check.description,
               lambda v: None if v is None else check.Normalize(v))


def OneOf(*values):
  """One of `values` (a misspelled string gets the near matches)."""
  description = 'one of %s' % ', '.join(repr(v) for v in values)
  check = Check(lambda v: v in values, description)

  def Described(value):
    if check(value) is None:
      return None
    near = errors.DidYouMean(value, [v for v in values if isinstance(v, str)]) if isinstance(value, str) else ''
    return description + (' (%s)' % near.strip() if near else '')

  return Described


def OrAuto(check):
  """'auto' (a value the trainer chooses, e.g. a pipeline's K), or what `check` allows."""
  return Check(lambda v: v == AUTO or check(v) is None, "'auto' or %s" % getattr(check, 'description', 'a value'),
               lambda v: v if v == AUTO else getattr(check, 'Normalize', lambda x: x)(v))


AUTO = 'auto'


def Str():
  return Check(lambda v: isinstance(v, str), 'a string')


def FloatDtype():
  """A floating-point tf.DType, or its name ('bfloat16', stored as tf.bfloat16)."""
  def Allows(v):
    if isinstance(v, str):
      v = tf.as_dtype(v[3:] if v.startswith('tf.') else v)
    return isinstance(v, tf.DType) and v.is_floating

  def Normalize(v):
    return tf.as_dtype(v[3:] if isinstance(v, str) and v.startswith('tf.') else v)

  return Check(Allows, 'a floating-point dtype (tf.float32, tf.bfloat16, tf.float16 or tf.float64)', Normalize)


def DtypeNames():
  """A dtype's name ('int32'), or a dict of them by input name."""
  name = lambda v: isinstance(v, str) and tf.as_dtype(v) is not None
  return Check(lambda v: name(v) or (isinstance(v, dict) and all(isinstance(k, str) and name(x) for k, x in v.items())),
               "a dtype name or a dict of them by input name, e.g. {'ids': 'int32'}")


def _Compiles(pattern):
  if not isinstance(pattern, str):
    return False
  re.compile(pattern)
  return True


def Regexes():
  """A list of regular expressions that compile."""
  return Check(lambda v: isinstance(v, (list, tuple)) and all(_Compiles(x) for x in v),
               "a list of regular expressions, e.g. ['softmax']")


def RegexRewrites():
  """A list of [regex, replacement] pairs whose regexes compile."""
  return Check(lambda v: isinstance(v, (list, tuple)) and all(
      isinstance(r, (list, tuple)) and len(r) == 2 and _Compiles(r[0]) and isinstance(r[1], str) for r in v),
               "a list of [regex, replacement] pairs, e.g. [['^network/', 'net/']]")
