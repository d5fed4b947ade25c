"""Hierarchical, documented, freezable hyper-parameters with a text form (Lingvo's `hyperparams` contract).

    p = Params()
    p.Define('dim', 8, 'Width of the layer.', check=param_checks.Int(1))  # what it allows, checked on every set
    p.dim = 16                       # attribute access; unknown names fail with "did you mean"
    p.Set(**{'cells[1].dim': 4})     # dotted paths with list indices
    p.Get('cells[1].dim')
    text = p.ToText()                # 'dim : 16' lines; FromText parses them back, typed by the current value

The text form (params_text.py) is what `--model_params_override` accepts and what the trainer writes to
`logdir/params.txt`.
"""

import copy
import enum
import re

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import params_text

NAME_RE = re.compile(r'^[a-z_][a-z0-9_]*$')
_PATH_TOKEN_RE = re.compile(r'^([a-z_][a-z0-9_]*)((?:\[\d+\])*)$')


class _Param:
  """One entry: a value, the sentence that documents it, and what it allows (param_checks; None: anything)."""

  __slots__ = ('name', 'value', 'description', 'check')

  def __init__(self, name, value, description, check=None):
    self.name, self.value, self.description, self.check = name, value, description, check

  def Validate(self, value, shown):
    """The value to store for `value` (a check may normalize it, e.g. 'bfloat16' to tf.bfloat16); raises
    ConfigError naming `shown` if the check refuses it."""
    if self.check is None:
      return value
    expected = self.check(value)
    if expected is not None:
      raise errors.ConfigError('Param %s: %s is not allowed; expected %s.' % (shown, _Shown(value), expected))
    normalize = getattr(self.check, 'Normalize', None)  # A check may be a plain function.
    return normalize(value) if normalize else value


def _Shown(value):
  try:
    return params_text.EncodeValue(value)
  except errors.ConfigError:
    return repr(value)


def _IsAtomic(value):
  return isinstance(value, (tf.DType, type, enum.Enum)) or value is None


def _CopyValue(value):
  if isinstance(value, Params):
    return value.Copy()
  if isinstance(value, list):
    return [_CopyValue(v) for v in value]
  if isinstance(value, tuple):
    return tuple(_CopyValue(v) for v in value)
  if isinstance(value, dict):
    return {k: _CopyValue(v) for k, v in value.items()}
  if _IsAtomic(value):
    return value
  return copy.deepcopy(value)


class Params:
  """A tree of named, documented values. See the module docstring."""

  def __init__(self):
    object.__setattr__(self, '_params', {})
    object.__setattr__(self, '_immutable', False)

  # -- definition ----------------------------------------------------------------------------------------------
  def Define(self, name, default_value, description, check=None):
    """Adds a param `name` with its default, a one-line description and optionally what values it allows (a
    param_checks.Check, applied to the default and to every value set later)."""
    if self._immutable:
      raise errors.FrozenParamsError('Cannot Define(%r) on frozen Params.' % name)
    if not isinstance(name, str) or not NAME_RE.match(name):
      raise errors.ConfigError('Param name %r is invalid: it must match %s.' % (name, NAME_RE.pattern))
    if name in self._params:
      raise errors.ConfigError('Param %r is already defined (as %s).' % (name, self._params[name].description))
    if not description or not isinstance(description, str):
      raise errors.ConfigError('Param %r needs a description.' % name)
    entry = _Param(name, default_value, description, check)
    entry.value = entry.Validate(default_value, name)
    self._params[name] = entry

  def Delete(self, *names):
    for name in names:
      self._Entry(name)
      del self._params[name]
    return self

  # -- access --------------------------------------------------------------------------------------------------
  def _Entry(self, name, where=None):
    try:
      return self._params[name]
    except KeyError:
      raise errors.UnknownParamError("%s has no param '%s'.%s" % (
          where or self._Owner(), name, errors.DidYouMean(name, self._params))) from None

  def _Owner(self):
    cls = self._params.get('cls')
    if cls is not None and isinstance(cls.value, type):
      return 'Params of %s' % cls.value.__name__
    return 'Params'

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    return self._Entry(name).value

  def __setattr__(self, name, value):
    if self._immutable:
      raise errors.FrozenParamsError("Cannot set param '%s': these Params are frozen." % name)
    entry = self._Entry(name)
    entry.value = entry.Validate(value, name)

  def __contains__(self, name):
    return name in self._params

  def __dir__(self):
    return sorted(set(super().__dir__()) | set(self._params))

  def __iter__(self):
    return iter(self._params)

  def IterParams(self):
    """Yields (name, value) pairs in definition order."""
    for name, entry in self._params.items():
      yield name, entry.value

  def Description(self, name):
    return self._Entry(name).description

  def _Resolve(self, path):
    """Returns (container, key, shown_path) for a dotted path like 'a.b[1].c'; container is Params or list."""
    tokens = path.split('.')
    node, shown = self, ''
    for i, token in enumerate(tokens):
      m = _PATH_TOKEN_RE.match(token)
      if not m:
        raise errors.ConfigError('Malformed param path %r at %r.' % (path, token))
      name, indices = m.group(1), [int(x) for x in re.findall(r'\[(\d+)\]', m.group(2))]
      if not isinstance(node, Params):
        raise errors.ConfigError('Param path %r: %s is not a Params.' % (path, shown or 'the root'))
      steps = [name] + indices
      for j, key in enumerate(steps):
        is_last = i == len(tokens) - 1 and j == len(steps) - 1
        if isinstance(key, str):
          node._Entry(key, where=shown or node._Owner())
          if is_last:
            return node, key, (shown + '.' + key).lstrip('.')
          node, shown = node._params[key].value, (shown + '.' + key).lstrip('.')
        else:
          if not isinstance(node, list) or key >= len(node):
            raise errors.ConfigError('Param path %r: %s has no index %d (it is %s).' % (
                path, shown, key, 'a list of %d' % len(node) if isinstance(node, list) else type(node).__name__))
          if is_last:
            return node, key, '%s[%d]' % (shown, key)
          node, shown = node[key], '%s[%d]' % (shown, key)
    raise errors.ConfigError('Empty param path.')

  def Get(self, path):
    """Returns the value at a dotted path such as 'task.cells[1].dim'."""
    container, key, _ = self._Resolve(path)
    return container._params[key].value if isinstance(container, Params) else container[key]

  def Set(self, **kwargs):
    """Sets values by name or dotted path (`p.Set(**{'a.b': 1})`); returns self for chaining."""
    for path, value in kwargs.items():
      container, key, shown = self._Resolve(path)
      if isinstance(container, Params):
        if container._immutable:
          raise errors.FrozenParamsError("Cannot set param '%s': these Params are frozen." % shown)
        container._params[key].value = container._params[key].Validate(value, shown)
      else:
        if self._immutable:
          raise errors.FrozenParamsError("Cannot set param '%s': these Params are frozen." % shown)
        container[key] = value
    return self

  # -- copying and freezing ------------------------------------------------------------------------------------
  def Copy(self):
    """A deep copy. The copy is not frozen, so a frozen layer's params can seed a new configuration."""
    new = type(self).__new__(type(self))
    object.__setattr__(new, '_params', {})
    object.__setattr__(new, '_immutable', False)
    for name, entry in self._params.items():
      new._params[name] = _Param(name, _CopyValue(entry.value), entry.description, entry.check)
    return new

  def Freeze(self):
    """Makes these Params and every nested Params read-only; returns self."""
    def FreezeValue(v):
      if isinstance(v, Params):
        v.Freeze()
      elif isinstance(v, (list, tuple)):
        for x in v:
          FreezeValue(x)
    for entry in self._params.values():
      FreezeValue(entry.value)
    object.__setattr__(self, '_immutable', True)
    return self

  @property
  def is_frozen(self):
    return self._immutable

  # -- text form -----------------------------------------------------------------------------------------------
  def _Flatten(self, prefix=''):
    """Yields (path, leaf value) pairs; nested Params and lists of Params are expanded."""
    for name, entry in self._params.items():
      yield from _FlattenValue(prefix + name, entry.value)

  def ToText(self):
    """One 'path : value' line per leaf, in definition order."""
    return ''.join('%s : %s\n' % (path, params_text.EncodeValue(v)) for path, v in self._Flatten())

  def FromText(self, text, separators=(':',)):
    """Sets leaves from text lines 'path : value' (or 'path = value'), each typed by its current value.

    Blank lines and lines starting with '#' are ignored. Lines may also be separated by ';'.
    """
    for raw in params_text.SplitStatements(text):
      line = raw.strip()
      if not line or line.startswith('#'):
        continue
      positions = [(line.find(s), s) for s in separators + ('=',) if line.find(s) > 0]
      if not positions:
        raise errors.ConfigError("Params text line %r has no 'key : value' or 'key=value' form." % line)
      pos, sep = min(positions)
      key, value_text = line[:pos].strip(), line[pos + len(sep):]
      container, name, shown = self._Resolve(key)
      current = container._params[name].value if isinstance(container, Params) else container[name]
      if isinstance(current, Params) and value_text.strip() != 'None':
        raise errors.ConfigError('Param %s is a nested Params; set its fields (%s.<name>) instead of %r.' %
                                 (shown, shown, value_text.strip()))
      check = container._params[name].check if isinstance(container, Params) else None
      self.Set(**{key: params_text.ConvertTextValue(shown, current, value_text, check)})
    return self

  def TextDiff(self, other):
    """Lines '< path : mine' and '> path : theirs' for every leaf that differs; '' when equal."""
    mine, theirs = dict(self._Flatten()), dict(other._Flatten())
    lines = []
    for path in list(mine) + [p for p in theirs if p not in mine]:
      a = params_text.EncodeValue(mine[path]) if path in mine else None
      b = params_text.EncodeValue(theirs[path]) if path in theirs else None
      if a != b:
        if a is not None:
          lines.append('< %s : %s' % (path, a))
        if b is not None:
          lines.append('> %s : %s' % (path, b))
    return '\n'.join(lines) + ('\n' if lines else '')

  def __eq__(self, other):
    return isinstance(other, Params) and list(self._Flatten()) == list(other._Flatten())

  def __ne__(self, other):
    return not self == other

  __hash__ = None

  def __repr__(self):
    return '%s(\n  %s)' % (self._Owner(), self.ToText().strip().replace('\n', '\n  '))

  __str__ = __repr__


def _FlattenValue(path, value):
  if isinstance(value, Params):
    yield from value._Flatten(path + '.')
  elif isinstance(value, (list, tuple)) and any(isinstance(v, Params) for v in value):
    for i, v in enumerate(value):
      if not isinstance(v, Params):
        raise errors.ConfigError('Param %s mixes Params and plain values; that has no text form.' % path)
      yield from v._Flatten('%s[%d].' % (path, i))
  else:
    yield path, value


def IterNested(value):
  """Yields every Params in a tree of Params, lists and tuples (depth first, `value` itself first)."""
  if isinstance(value, Params):
    yield value
    for _, v in value.IterParams():
      yield from IterNested(v)
  elif isinstance(value, (list, tuple)):
    for v in value:
      yield from IterNested(v)


class InstantiableParams(Params):
  """Params that know the class they configure: `p.Instantiate()` returns `p.cls(p)`."""

  def __init__(self, cls=None):
    super().__init__()
    self.Define('cls', cls, 'The class these params build.')

  def Instantiate(self, **kwargs):
    if self.cls is None:
      raise errors.ConfigError('These params have no cls to instantiate.')
    return self.cls(self, **kwargs)
