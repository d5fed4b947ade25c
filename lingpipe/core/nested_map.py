"""NestedMap: a dict with attribute access, used for every structured input and output in lingpipe.

Leaves are anything that is not a NestedMap, dict or list (tensors, arrays, numbers). `Flatten` returns the
leaves in a deterministic order (sorted keys, list order) and `Pack` rebuilds the structure from such a list, so
a NestedMap can travel through `tf.function`, `tf.nest` and between pipeline cells.
"""

import re

from lingpipe.core import errors

_KEY_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
_RESERVED = frozenset(dir(dict))


def _CheckKey(key):
  if not isinstance(key, str) or not _KEY_RE.match(key):
    raise errors.ConfigError('NestedMap key %r is invalid: keys must be identifiers matching %s.' %
                             (key, _KEY_RE.pattern))
  if key in _RESERVED or key in NestedMap.__dict__:
    raise errors.ConfigError('NestedMap key %r is reserved (it names a dict or NestedMap method).' % key)


class NestedMap(dict):
  """A dict whose keys are also attributes. See the module docstring."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    for key in self:
      _CheckKey(key)

  def __setitem__(self, key, value):
    _CheckKey(key)
    super().__setitem__(key, value)

  def __getattr__(self, name):
    try:
      return self[name]
    except KeyError:
      raise AttributeError("NestedMap has no field '%s'; it has: %s.%s" % (
          name, ', '.join(sorted(self)) or 'nothing', errors.DidYouMean(name, self))) from None

  def __setattr__(self, name, value):
    self[name] = value

  def __delattr__(self, name):
    try:
      del self[name]
    except KeyError:
      raise AttributeError(name) from None

  def setdefault(self, key, default=None):
    _CheckKey(key)
    return super().setdefault(key, default)

  def update(self, *args, **kwargs):
    for key, value in dict(*args, **kwargs).items():
      self[key] = value

  def copy(self):
    """A shallow copy at every level of the structure (leaves are shared)."""
    return self.Transform(lambda x: x)

  def DeepCopy(self):
    return self.copy()

  # -- structure -----------------------------------------------------------------------------------------------
  def FlattenItems(self):
    """[(path, leaf)] with paths like 'a.b[0].c', in Flatten order."""
    out = []

    def Walk(prefix, value):
      if isinstance(value, dict):
        for key in sorted(value):
          Walk('%s.%s' % (prefix, key) if prefix else key, value[key])
      elif isinstance(value, (list, tuple)) and not _IsNamedTuple(value):
        for i, v in enumerate(value):
          Walk('%s[%d]' % (prefix, i), v)
      else:
        out.append((prefix, value))

    Walk('', self)
    return out

  def Flatten(self):
    """The leaves in a deterministic order (sorted keys)."""
    return [v for _, v in self.FlattenItems()]

  def Pack(self, leaves):
    """A NestedMap with this structure whose leaves are taken, in Flatten order, from `leaves`."""
    leaves = list(leaves)
    expected = len(self.FlattenItems())
    if len(leaves) != expected:
      raise errors.ConfigError('NestedMap.Pack got %d leaves; this structure has %d (%s).' % (
          len(leaves), expected, ', '.join(self.Keys())))
    it = iter(leaves)

    def Build(value):
      if isinstance(value, dict):
        return NestedMap({key: Build(value[key]) for key in sorted(value)})
      if isinstance(value, (list, tuple)) and not _IsNamedTuple(value):
        return type(value)(Build(v) for v in value)
      return next(it)

    return Build(self)

  def Transform(self, fn):
    """A NestedMap of the same structure with `fn` applied to every leaf."""
    return self.Pack([fn(v) for v in self.Flatten()])

  def Keys(self):
    """The leaf paths, in Flatten order."""
    return [k for k, _ in self.FlattenItems()]

  def IsCompatible(self, other):
    """True when `other` has the same structure (keys and list lengths)."""
    return isinstance(other, dict) and NestedMap(other).Keys() == self.Keys()

  def FilterKeyVal(self, fn):
    """A NestedMap with only the leaves for which fn(path, value) is true; emptied branches are dropped."""
    drop = object()

    def Filter(prefix, value):
      if isinstance(value, dict):
        kept = NestedMap()
        for key in sorted(value):
          v = Filter('%s.%s' % (prefix, key) if prefix else key, value[key])
          if v is not drop:
            kept[key] = v
        return kept if kept or not prefix else drop
      if isinstance(value, (list, tuple)) and not _IsNamedTuple(value):
        kept = [v for v in (Filter('%s[%d]' % (prefix, i), x) for i, x in enumerate(value)) if v is not drop]
        return type(value)(kept) if kept else drop
      return value if fn(prefix, value) else drop

    return Filter('', self)

  def GetItem(self, path):
    """The value at a dotted path 'a.b'."""
    node = self
    for part in path.split('.'):
      node = node[part]
    return node

  def DebugString(self):
    """One 'path  value' line per leaf; tensors show their shape and dtype rather than their values."""
    lines = []
    for path, value in self.FlattenItems():
      if hasattr(value, 'shape') and hasattr(value, 'dtype'):
        shown = '%s %s' % (getattr(value.dtype, 'name', value.dtype), list(value.shape))
      else:
        shown = repr(value)
      lines.append('%-20s %s' % (path, shown))
    return '\n'.join(lines)

  def __repr__(self):
    return 'NestedMap(%s)' % ', '.join('%s=%r' % (k, self[k]) for k in sorted(self))


def _IsNamedTuple(value):
  return isinstance(value, tuple) and hasattr(value, '_fields')

