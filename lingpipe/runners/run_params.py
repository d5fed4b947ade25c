"""The Params of a run: the registered model's, with a params file, text overrides, max_steps and seed applied,
and for eval, decode and export the values the training run recorded (recorded_params.py). The trainer builds its
params here; so do the tools and the memory trials that build a model as the trainer would."""

import os

# Nothing here imports TensorFlow when the module loads: the trainer imports it before it sets up the process.


def _ReadParamsFile(path):
  """The text of a params file, or one line naming the path and why it cannot be read."""
  from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
  try:
    with open(path, encoding='utf-8') as f:
      return f.read()
  except FileNotFoundError as e:
    raise errors.DataFileNotFoundError('--model_params_file_override: no file %s.' % path) from e
  except UnicodeDecodeError as e:
    raise errors.ConfigError('--model_params_file_override: %s is not params text (not UTF-8 at byte %d); give '
                             "a file of 'a.b : value' lines such as a logdir's params.txt." % (path, e.start)) from e
  except OSError as e:
    raise errors.ConfigError('--model_params_file_override: cannot read %s: %s.' % (path, e.strerror)) from e


# Params the trainer sets from its flags: overriding them would be recorded in params.txt but not applied.
_DERIVED = (('model', '--model'), ('dataset', '--eval_dataset (eval and decode; training reads Train)'))


def BuildModelParams(model, dataset='Train', params_file=None, override='', max_steps=None, seed=None,
                     auto_pipeline=False):
  """The registered model's params for `dataset` with the file and text overrides, max_steps and seed applied;
  with `auto_pipeline`, the pipeline fields the overrides leave are 'auto' (runners/pipeline_choice.py)."""
  return _BuildParams(model, dataset, params_file, override, max_steps, seed, auto_pipeline=auto_pipeline)[0]


def BuildRunParams(logdir, model, dataset='Train', params_file=None, override='', max_steps=None, seed=None):
  """(params, a line saying what was taken from the run, or None): BuildModelParams, with the task values the run
  in `logdir` recorded taken before the overrides (recorded_params.py), as eval, decode and export need."""
  from lingpipe.logdir import checkpointer  # pylint: disable=g-import-not-at-top
  return _BuildParams(model, dataset, params_file, override, max_steps, seed, (
      os.path.join(logdir, checkpointer.PARAMS_FILE), checkpointer.RecordedParamsText(logdir)))


def _BuildParams(model, dataset, params_file, override, max_steps, seed, recorded=None, auto_pipeline=False):
  from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
  from lingpipe.model import model_registry  # pylint: disable=g-import-not-at-top
  from lingpipe.logdir import recorded_params  # pylint: disable=g-import-not-at-top
  p = model_registry.GetParams(model, dataset)
  adopted = recorded_params.Adopt(p, recorded[1]) if recorded else None
  if auto_pipeline:
    if not SetAuto(p):
      raise errors.ConfigError('--pipeline=auto: model %s has no PipeliningLayer to configure.' % model)
  for what, text in (('--model_params_file_override=%s' % params_file, _ReadParamsFile(params_file)
                      if params_file else ''), ('--model_params_override', override)):
    if not text:
      continue
    p.FromText(text)
    for name, flag in _DERIVED:
      expected = model if name == 'model' else dataset
      if p.Get(name) != expected:
        raise errors.ConfigError('%s sets %s to %r, but %s is set by %s (here %r); nothing was written. Remove it '
                                 'from the override.' % (what, name, p.Get(name), name, flag, expected))
  if max_steps is not None:
    p.task.train.max_steps = max_steps
  if seed is not None:
    p.task.random_seed = seed
    p.input.seed = seed
  return p, recorded_params.Note(p, recorded[0], *adopted) if recorded else None


def Pipelines(params, path=''):
  """[(path, params)] of every PipeliningLayer's Params in a tree of Params."""
  from lingpipe.core import hyperparams  # pylint: disable=g-import-not-at-top
  found = []
  if isinstance(params, hyperparams.Params):
    if 'cell_tpl' in params and 'num_splits' in params and 'auto_choice' in params:
      found.append((path, params))
    for name, value in params.IterParams():
      found.extend(Pipelines(value, '%s.%s' % (path, name) if path else name))
  elif isinstance(params, (list, tuple)):
    for i, value in enumerate(params):
      found.extend(Pipelines(value, '%s[%d]' % (path, i)))
  return found


def SetAuto(p):
  """Sets the five fields of every pipeline in model params `p` to 'auto' (--pipeline=auto, before overrides);
  returns how many pipelines there are."""
  from lingpipe.core import param_checks  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe import pipelining_layer  # pylint: disable=g-import-not-at-top
  pipelines = Pipelines(p.task)
  for _, pipe in pipelines:
    for name in pipelining_layer.AUTO_FIELDS:
      pipe.Set(**{name: param_checks.AUTO})
  return len(pipelines)
