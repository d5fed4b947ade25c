"""The model registry: keys from module paths, duplicates, near matches, model Params."""

import sys

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


def test_a_model_in_a_package_of_the_current_folder_is_imported_and_a_missing_one_says_where_it_looked(
    tmp_path, monkeypatch):
  package = tmp_path / 'ownpkg_for_registry'
  package.mkdir()
  (package / '__init__.py').write_text('')
  (package / 'models.py').write_text(
      'from lingpipe.model import model_registry\nfrom lingpipe.params import synthetic\n\n\n'
      '@model_registry.RegisterSingleTaskModel\nclass Wide(synthetic.Mlp):\n  pass\n')
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(model_registry, '_REGISTRY', dict(model_registry._REGISTRY))  # Registered for this test alone.
  monkeypatch.setattr(sys, 'path', [p for p in sys.path if p not in ('', str(tmp_path))])
  try:
    assert model_registry.GetClass('ownpkg_for_registry.models.Wide').__name__ == 'Wide'
  finally:
    for name in ('ownpkg_for_registry.models', 'ownpkg_for_registry'):
      sys.modules.pop(name, None)
  with pytest.raises(errors.ConfigError, match=r"Unknown model 'ownpkg_for_registry\.modls\.Wide'.* No module "
                     r"ownpkg_for_registry\.modls was found in lingpipe\.params, the current folder \(%s\) or the "
                     r"Python path" % str(tmp_path).replace('.', r'\.')):
    model_registry.GetClass('ownpkg_for_registry.modls.Wide')


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
