"""The model registry: keys from module paths, duplicates, near matches, model Params."""

import pytest

from lingpipe.core import errors
from lingpipe.model import base_model_params
from lingpipe.model import model_registry


def test_bundled_model_key_comes_from_module_path():
  models = model_registry.GetAllRegisteredModels()
  assert 'synthetic.Mlp' in models
  assert models['synthetic.Mlp'].__module__ == 'lingpipe.params.synthetic'


def test_get_params_has_task_and_dataset_input():
  p = model_registry.GetParams('synthetic.Mlp', 'Test')
  assert p.model == 'synthetic.Mlp' and p.dataset == 'Test'
  assert p.input.split == 'test' and not p.input.repeat
  assert p.task.softmax.num_classes == 4
  with pytest.raises(errors.ConfigError, match="Unknown dataset 'Tset'.*Did you mean: Test"):
    model_registry.GetParams('synthetic.Mlp', 'Tset')


def test_unknown_model_lists_near_matches():
  with pytest.raises(errors.ConfigError) as e:
    model_registry.GetClass('synthetic.Mpl')
  assert str(e.value).startswith("Unknown model 'synthetic.Mpl'. Did you mean: synthetic.Mlp, ")
  with pytest.raises(errors.ConfigError, match='Did you mean: synthetic.Mlp'):
    model_registry.GetClass('Mlp')


def test_duplicate_registration_raises():

  class Twice(base_model_params.SingleTaskModelParams):
    pass

  model_registry.RegisterSingleTaskModel(Twice)
  assert model_registry.GetClass('%s.Twice' % __name__) is Twice

  class Other(base_model_params.SingleTaskModelParams):
    pass

  Other.__name__ = 'Twice'
  with pytest.raises(errors.ConfigError, match='registered twice'):
    model_registry.RegisterSingleTaskModel(Other)
  with pytest.raises(errors.ConfigError, match='needs a SingleTaskModelParams subclass'):
    model_registry.RegisterSingleTaskModel(int)


def test_model_without_test_set_says_so():

  class NoTest(base_model_params.SingleTaskModelParams):
    pass

  with pytest.raises(errors.ConfigError, match='defines no Test'):
    NoTest().Dev()
