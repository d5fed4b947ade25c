"""The model registry: `@RegisterSingleTaskModel` on a SingleTaskModelParams subclass makes it trainable by name.

The key is the class's module path under `lingpipe.params` plus its name: `AmoebaNetD` in
`lingpipe/params/image/cifar10.py` is `image.cifar10.AmoebaNetD`. Models defined in other packages keep their
full module path (`mypkg.models.Big`); pass that to `--model` and the module is imported on demand.
"""

import importlib
import os
import pkgutil
import sys

from lingpipe.core import errors
from lingpipe.model import base_model_params

PARAMS_PACKAGE = 'lingpipe.params'

_REGISTRY = {}


def _Key(cls):
  module = cls.__module__
  if module.startswith(PARAMS_PACKAGE + '.'):
    module = module[len(PARAMS_PACKAGE) + 1:]
  return '%s.%s' % (module, cls.__name__)


def RegisterSingleTaskModel(cls):
  """Class decorator: registers `cls` under its module-path key. Registering a key twice raises."""
  if not (isinstance(cls, type) and issubclass(cls, base_model_params.SingleTaskModelParams)):
    raise errors.ConfigError('RegisterSingleTaskModel needs a SingleTaskModelParams subclass, got %r.' % (cls,))
  key = _Key(cls)
  existing = _REGISTRY.get(key)
  if existing is not None and existing is not cls:
    raise errors.ConfigError('Model %s is registered twice: by %s.%s and by %s.%s.' % (
        key, existing.__module__, existing.__qualname__, cls.__module__, cls.__qualname__))
  _REGISTRY[key] = cls
  return cls


def ImportAllParams():
  """Imports every module under lingpipe.params, registering all bundled models."""
  package = importlib.import_module(PARAMS_PACKAGE)
  for info in pkgutil.walk_packages(package.__path__, PARAMS_PACKAGE + '.'):
    importlib.import_module(info.name)


def GetAllRegisteredModels():
  """{key: class} of every bundled and already-imported model."""
  ImportAllParams()
  return dict(_REGISTRY)


def _TryImport(key):
  """Imports the module `key` names: under lingpipe.params, else as given, from the Python path or else from the
  current folder (as `python -m` would). Returns what a failure to find it should say, or ''."""
  module = key.rsplit('.', 1)[0] if '.' in key else ''
  if not module:
    return ''
  cwd = os.getcwd()
  for name, folder in ((PARAMS_PACKAGE + '.' + module, None), (module, None), (module, cwd)):
    if folder is not None:
      if folder in sys.path:
        continue
      sys.path.append(folder)  # Kept where the import succeeds: the module's own imports may need it later.
    try:
      importlib.import_module(name)
      return ''
    except ModuleNotFoundError as e:
      if folder is not None:
        sys.path.remove(folder)
      if e.name is None or not name.startswith(e.name):
        raise  # The module exists but one of its own imports is missing: a real error.
  return (' No module %s was found in lingpipe.params, the current folder (%s) or the Python path; a model of your '
          'own package is imported from there.' % (module, cwd))


def GetClass(key):
  """The registered class for `key`; unknown keys raise ConfigError listing the near matches (and, where its module
  was found nowhere, where it was looked for)."""
  not_found = ''
  if key not in _REGISTRY:
    not_found = _TryImport(key)
  if key not in _REGISTRY:
    known = GetAllRegisteredModels()
    raise errors.ConfigError('Unknown model %r.%s (%d models registered; list them with '
                             'lingpipe-train --mode=list.)%s' % (key, errors.DidYouMean(key, known), len(known),
                                                                 not_found))
  return _REGISTRY[key]


def GetParams(key, dataset='Train'):
  """The model Params (model, dataset, task, input) of registered model `key` for `dataset`."""
  return GetClass(key)().Model(key, dataset)
