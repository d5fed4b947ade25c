"""The text form of Params values: 'path : value' lines, as `--model_params_override` takes them and
`logdir/params.txt` records them (hyperparams.Params.ToText and FromText)."""

import ast
import enum
import importlib
import io
import tokenize

import tensorflow as tf

from lingpipe.core import errors


def ImportQualified(module_name, qualname):
  """The object `qualname` (dotted: a class's member too) of module `module_name`, named in params text."""
  try:
    obj = importlib.import_module(module_name)
  except ImportError as e:
    raise errors.ConfigError('Cannot import module %r named in params text: %s' % (module_name, e)) from e
  for part in qualname.split('.'):
    if not hasattr(obj, part):
      raise errors.ConfigError('Module %r has no %r (named in params text).%s' % (
          module_name, qualname, errors.DidYouMean(part, [n for n in dir(obj) if not n.startswith('_')])))
    obj = getattr(obj, part)
  return obj


def EncodeValue(value):
  """Returns the text form of one leaf value."""
  if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
    return repr(value)
  if isinstance(value, str):
    return repr(value)
  if isinstance(value, tf.DType):
    return 'tf.' + value.name
  if isinstance(value, enum.Enum):
    cls = type(value)
    return 'enum/%s/%s/%s' % (cls.__module__, cls.__qualname__, value.name)
  if isinstance(value, type):
    return 'type/%s/%s' % (value.__module__, value.__qualname__)
  if isinstance(value, (list, tuple, dict)):
    text = repr(value)
    try:
      ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
      raise errors.ConfigError('Value %r has no text form: lists, tuples and dicts in Params may hold only '
                               'Python literals.' % (value,)) from e
    return text
  raise errors.ConfigError('Value %r of type %s has no text form; use a literal, a dtype, an enum or a class.'
                           % (value, type(value).__name__))


def DecodeValue(text, key=None):
  """Parses a text value without knowing its expected type (`key`: the param it is for, named in errors)."""
  text = text.strip()
  if text.startswith('tf.'):
    try:
      return tf.as_dtype(text[3:])
    except TypeError as e:
      raise errors.ConfigError('Unknown dtype %r.' % text) from e
  if text.startswith('type/'):
    _, module_name, qualname = text.split('/', 2)
    return ImportQualified(module_name, qualname)
  if text.startswith('enum/'):
    _, module_name, qualname, member = text.split('/', 3)
    cls = ImportQualified(module_name, qualname)
    try:
      return cls[member]
    except KeyError as e:
      raise errors.ConfigError('Enum %s has no member %r.%s' % (qualname, member, errors.DidYouMean(
          member, cls.__members__))) from e
  try:
    value = ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text  # An unquoted string.
  joined = _AdjacentStrings(text)
  if joined:
    raise errors.ConfigError('%s %s: the strings %s stand side by side, which Python would join into one (%r); put '
                             'a comma between list items, or write one string.' % (
                                 'Param %s: value' % key if key else 'Params value', text, ' '.join(joined),
                                 ''.join(ast.literal_eval(t) for t in joined)))
  return value


def _AdjacentStrings(text):
  """The first run of string literals in `text` with nothing between them ('a' 'b': a missing comma), or []."""
  try:
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
              if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENDMARKER)]
  except (tokenize.TokenError, SyntaxError):
    return []
  run = []
  for token in tokens:
    if token.type == tokenize.STRING:
      run.append(token.string)
      continue
    if len(run) > 1:
      return run
    run = []
  return run if len(run) > 1 else []


def _TypeName(value):
  if isinstance(value, tf.DType):
    return 'a dtype like tf.float32'
  if isinstance(value, type):
    return 'a class like type/module/Name'
  if isinstance(value, enum.Enum):
    return 'one of %s' % ', '.join(type(value).__members__)
  return type(value).__name__


def ConvertTextValue(key, current, text, check=None):
  """Parses `text` as a new value for `key`, typed by the `current` value (a leaf, not a Params), or any value the
  param's `check` allows (param_checks.OrAuto's 'auto' in an int param); raises ConfigError on mismatch."""
  raw = text.strip()
  if check is not None and current is not None and raw != 'None':  # Another type than the current value's.
    try:
      value = DecodeValue(raw, key)
    except errors.ConfigError:
      value = None
    if isinstance(value, (str, int, list)) and not isinstance(current, type(value)) and check(value) is None:
      return value

  def Fail():
    expected = getattr(check, 'description', None) or _TypeName(current)
    return errors.ConfigError('Param %s: cannot use %r; expected %s (current value %s).' % (
        key, raw, expected, EncodeValue(current)))

  if raw == 'None':
    return None
  if isinstance(current, enum.Enum):
    cls = type(current)
    name = raw.split('/')[-1].split('.')[-1]
    if name in cls.__members__:
      return cls[name]
    raise Fail()
  if isinstance(current, tf.DType):
    name = DecodeValue(raw, key) if raw[:1] in ('"', "'") else raw  # tf.bfloat16, bfloat16 or 'bfloat16'.
    try:
      return tf.as_dtype(name[3:] if name.startswith('tf.') else name)
    except TypeError:
      raise Fail() from None
  if isinstance(current, str):
    value = DecodeValue(raw, key)
    return value if isinstance(value, str) else raw
  value = DecodeValue(raw, key)
  if current is None:
    return value
  if isinstance(current, bool):
    if isinstance(value, str) and value.lower() in ('true', 'false'):
      return value.lower() == 'true'
    if isinstance(value, bool):
      return value
    raise Fail()
  if isinstance(current, int):
    if isinstance(value, int) and not isinstance(value, bool):
      return value
    raise Fail()
  if isinstance(current, float):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
      return float(value)
    raise Fail()
  if isinstance(current, (list, tuple)):
    if isinstance(value, (list, tuple)):
      return type(current)(value)
    raise Fail()
  if isinstance(current, type):
    if isinstance(value, type):
      return value
    raise Fail()
  if isinstance(current, dict):
    if isinstance(value, dict):
      return value
    raise Fail()
  return value


def SplitStatements(text):
  """Splits text into statements at newlines and at ';' outside strings and brackets.

  A quote opens a string only where a value or an element starts (after ':', '=', '[', '(', '{' or ',', or at the
  start of a statement), so the apostrophe of an unquoted bob's is a letter; a string left open at the end of its
  line is an error naming the statement, rather than swallowing the statements after it.
  """
  statements, current, quote, depth, escaped = [], [], None, 0, False

  def Unclosed():
    return errors.ConfigError('Params text: the string opened by %s in %r is never closed; quote the whole value '
                              '(name="it\'s") or leave it unquoted (name=its).' % (quote, ''.join(current).strip()))

  for ch in text:
    if quote:
      if ch == '\n':
        raise Unclosed()
      if escaped:
        escaped = False
      elif ch == '\\':
        escaped = True
      elif ch == quote:
        quote = None
    elif ch in '\'"' and (''.join(current).rstrip()[-1:] or ':') in ':=[({,':
      quote = ch
    elif ch in '([{':
      depth += 1
    elif ch in ')]}':
      depth -= 1
    elif ch == '\n' or (ch == ';' and depth <= 0):
      statements.append(''.join(current))
      current, depth = [], 0
      continue
    current.append(ch)
  if quote:
    raise Unclosed()
  statements.append(''.join(current))
  return statements
