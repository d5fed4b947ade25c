"""Params: definition, access, paths, copy, freeze, text round-trip, diff, instantiation, errors."""

import enum

import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import hyperparams


class Color(enum.Enum):
  RED = 1
  BLUE = 2


class Thing:

  def __init__(self, params):
    self.params = params


def _Cell(dim):
  p = hyperparams.Params()
  p.Define('dim', dim, 'Width.')
  p.Define('act', 'relu', 'Activation.')
  return p


def _Nested():
  p = hyperparams.InstantiableParams(Thing)
  p.Define('hidden_dim', 8, 'Hidden width.')
  p.Define('hidden_dims', [1, 2], 'Widths.')
  p.Define('rate', 0.5, 'A float.')
  p.Define('flag', True, 'A bool.')
  p.Define('label', 'abc', 'A string.')
  p.Define('nothing', None, 'None.')
  p.Define('pair', (3, 4), 'A tuple.')
  p.Define('table', {'a': 1, 'b': [2, 3]}, 'A dict.')
  p.Define('color', Color.RED, 'An enum.')
  p.Define('dtype', tf.float32, 'A dtype.')
  p.Define('klass', Thing, 'A class.')
  p.Define('child', _Cell(3), 'Nested params.')
  p.Define('cells', [_Cell(1), _Cell(2)], 'A list of params.')
  return p


def test_define_and_access():
  p = _Nested()
  assert p.hidden_dim == 8
  p.hidden_dim = 16
  assert p.Get('hidden_dim') == 16
  assert p.child.dim == 3
  assert p.Description('rate') == 'A float.'
  assert 'rate' in p and 'nope' not in p


def test_define_rejects_bad_names_duplicates_and_missing_descriptions():
  p = hyperparams.Params()
  for bad in ('Upper', '1x', 'a-b', ''):
    with pytest.raises(errors.ConfigError, match='invalid'):
      p.Define(bad, 1, 'doc')
  p.Define('x', 1, 'doc')
  with pytest.raises(errors.ConfigError, match="Param 'x' is already defined"):
    p.Define('x', 2, 'doc')
  with pytest.raises(errors.ConfigError, match='needs a description'):
    p.Define('y', 2, '')


def test_unknown_name_says_did_you_mean():
  p = _Nested()
  with pytest.raises(AttributeError) as e:
    _ = p.hiden_dim
  assert str(e.value) == "Params of Thing has no param 'hiden_dim'. Did you mean: hidden_dim, hidden_dims?"
  with pytest.raises(errors.UnknownParamError) as e:
    p.hiden_dim = 3
  assert str(e.value) == "Params of Thing has no param 'hiden_dim'. Did you mean: hidden_dim, hidden_dims?"
  with pytest.raises(errors.UnknownParamError) as e:
    p.Set(**{'child.dimm': 3})
  assert str(e.value) == "child has no param 'dimm'. Did you mean: dim?"
  with pytest.raises(errors.UnknownParamError) as e:
    p.Get('zzz')
  assert str(e.value) == "Params of Thing has no param 'zzz'."


def test_dotted_paths_and_list_indices():
  p = _Nested()
  p.Set(**{'cells[1].dim': 7, 'child.act': 'gelu', 'hidden_dims[0]': 5})
  assert p.Get('cells[1].dim') == 7 and p.cells[1].dim == 7
  assert p.Get('child.act') == 'gelu'
  assert p.hidden_dims == [5, 2]
  with pytest.raises(errors.ConfigError, match=r'cells has no index 5 \(it is a list of 2\)'):
    p.Get('cells[5].dim')
  with pytest.raises(errors.ConfigError, match='Malformed'):
    p.Get('cells[x].dim')


def test_set_chains_and_copy_is_deep():
  p = _Nested()
  q = p.Copy().Set(hidden_dim=1)
  q.cells[0].dim = 100
  q.hidden_dims.append(9)
  assert p.hidden_dim == 8 and p.cells[0].dim == 1 and p.hidden_dims == [1, 2]
  assert q.klass is Thing and q.dtype == tf.float32


def test_freeze():
  p = _Nested().Freeze()
  assert p.is_frozen and p.child.is_frozen and p.cells[0].is_frozen
  with pytest.raises(errors.FrozenParamsError, match="Cannot set param 'hidden_dim': these Params are frozen."):
    p.hidden_dim = 2
  with pytest.raises(TypeError):
    p.cells[1].dim = 2
  with pytest.raises(errors.FrozenParamsError):
    p.Set(**{'child.dim': 2})
  with pytest.raises(errors.FrozenParamsError):
    p.Define('new', 1, 'doc')
  assert not p.Copy().is_frozen


def test_text_round_trip_of_every_value_type():
  p = _Nested()
  p.Set(hidden_dim=-3, rate=1e-7, flag=False, label="it's: a=b; c", nothing=None, pair=(5, 6),
        table={'x': [1, 2], 'y': None}, color=Color.BLUE, dtype=tf.bfloat16, klass=Color)
  p.cells[1].act = 'tanh'
  text = p.ToText()
  assert 'cells[1].act : \'tanh\'' in text
  assert 'dtype : tf.bfloat16' in text
  assert 'klass : type/%s/Color' % __name__ in text
  assert 'color : enum/%s/Color/BLUE' % __name__ in text
  q = _Nested().FromText(text)
  assert q == p
  assert q.ToText() == text
  assert q.pair == (5, 6) and isinstance(q.pair, tuple)
  assert q.klass is Color and q.color is Color.BLUE and q.dtype == tf.bfloat16


def test_from_text_accepts_override_syntax_and_types_by_current_value():
  p = _Nested()
  p.FromText('hidden_dim=4; rate=2; flag=false; label=plain words; child.dim=9\n# comment\n\ncolor=BLUE')
  assert p.hidden_dim == 4 and p.rate == 2.0 and isinstance(p.rate, float)
  assert p.flag is False and p.label == 'plain words' and p.child.dim == 9 and p.color is Color.BLUE
  p.FromText('nothing=[1, 2]; table={"k": "v;w"}')
  assert p.nothing == [1, 2] and p.table == {'k': 'v;w'}


def test_from_text_wrong_type_names_key_value_and_expectation():
  p = _Nested()
  with pytest.raises(errors.ConfigError) as e:
    p.FromText('hidden_dim=abc')
  assert str(e.value) == "Param hidden_dim: cannot use 'abc'; expected int (current value 8)."
  with pytest.raises(errors.ConfigError, match='expected list'):
    p.FromText('hidden_dims=3')
  with pytest.raises(errors.ConfigError, match='expected one of RED, BLUE'):
    p.FromText('color=GREEN')
  with pytest.raises(errors.ConfigError, match='is a nested Params'):
    p.FromText('child=3')
  with pytest.raises(errors.ConfigError, match="no 'key : value'"):
    p.FromText('just words')


def test_text_diff():
  p, q = _Nested(), _Nested()
  assert p.TextDiff(q) == ''
  q.hidden_dim = 9
  q.cells[0].act = 'gelu'
  assert p.TextDiff(q) == ("< hidden_dim : 8\n> hidden_dim : 9\n"
                           "< cells[0].act : 'relu'\n> cells[0].act : 'gelu'\n")


def test_instantiate():
  p = _Nested()
  thing = p.Instantiate()
  assert isinstance(thing, Thing) and thing.params is p
  with pytest.raises(errors.ConfigError, match='no cls'):
    hyperparams.InstantiableParams().Instantiate()


def test_values_without_text_form_are_refused():
  p = hyperparams.Params()
  p.Define('fn', lambda x: x, 'A function.')
  with pytest.raises(errors.ConfigError, match='has no text form'):
    p.ToText()
