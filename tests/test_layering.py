"""The package's layers import downwards only, and no module imports itself through others.

core is the foundation; memory (a process's budget: cgroups, the guard, the workers' reports, the process model)
builds on it alone, but for what measures processes by running them or plans models to (the calibration, its trials,
the advice at a memory death: MEMORY_MEASURES), which sits on everything below runners; distributed on core and
memory; gpipe on core and distributed, its engine (what runs a step) and planner (what predicts one) on gpipe's leaf
modules (the plan, the schedules, the timeline), its choice (what chooses by stepping real pipelines, and what the
planner sees of a model) on all of gpipe, and nothing else of gpipe on it; model (a registered model's params, task
and registry) on core and distributed; logdir (what keeps a run's folder safe: atomic writes, checkpoints, the lock)
on core, memory and distributed. runners (the trainer's modes) and keras sit above them all.
"""

import ast
import glob
import io
import os
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lingpipe')
ALLOWED = {  # package -> the lingpipe packages its modules may import
    'core': {'core'},
    'memory': {'core', 'memory'},
    'distributed': {'core', 'memory', 'distributed'},
    'gpipe': {'core', 'distributed', 'gpipe'},
    'logdir': {'core', 'memory', 'distributed', 'logdir'},
    'layers': {'core', 'layers'},
    'model': {'core', 'distributed', 'model'},
}
# memory's modules that run training processes or plan models to measure memory: above gpipe, distributed, logdir and
# model, which import none of them (the rest of memory sits below all four).
MEMORY_MEASURES = {'memory/calibration.py': {'core', 'memory', 'distributed', 'logdir', 'model', 'gpipe'},
                   'memory/memory_trials.py': {'core', 'memory', 'distributed'},
                   'memory/memory_advice.py': {'core', 'memory', 'gpipe'}}
# gpipe's modules that its rooms may import: the leaves below the layer.
_GPIPE_LEAVES = {'gpipe.plan', 'gpipe.schedule', 'gpipe.timeline', 'gpipe.microbatch', 'gpipe.cell_params'}
ROOMS = {  # gpipe's rooms -> the gpipe modules (or rooms) they may import
    'gpipe/engine': _GPIPE_LEAVES | {'gpipe.engine'},
    'gpipe/planner': _GPIPE_LEAVES | {'gpipe.engine', 'gpipe.planner'},
    'gpipe/choice': _GPIPE_LEAVES | {'gpipe.engine', 'gpipe.planner', 'gpipe.choice', 'gpipe.pipelining_layer'},
}


def _ModuleName(path):
  name = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, '.')
  return name[:-len('.__init__')] if name.endswith('.__init__') else name


def _Imports(path):
  """The lingpipe modules (or packages) a file imports, at any depth of the file, as dotted names."""
  tree = ast.parse(open(path).read(), path)
  package = _ModuleName(path) if path.endswith('__init__.py') else _ModuleName(path).rpartition('.')[0]
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        base = package + ('.' + base if base else '')
      if base.split('.')[0] == 'lingpipe':
        found.update('%s.%s' % (base, alias.name) for alias in node.names)
    elif isinstance(node, ast.Import):
      found.update(alias.name for alias in node.names if alias.name.split('.')[0] == 'lingpipe')
  return found


def _Files(folder):
  return sorted(glob.glob(os.path.join(ROOT, folder, '**', '*.py'), recursive=True))


@pytest.mark.parametrize('package', sorted(ALLOWED))
def test_packages_import_downwards_only(package):
  bad = {}
  for path in _Files(package):
    allowed = MEMORY_MEASURES.get(os.path.relpath(path, ROOT).replace(os.sep, '/'), ALLOWED[package])
    extra = {name.split('.')[1] for name in _Imports(path) if len(name.split('.')) > 2} - allowed
    measures = {'lingpipe.' + m[:-3].replace('/', '.') for m in MEMORY_MEASURES}
    if os.path.relpath(path, ROOT).replace(os.sep, '/') not in MEMORY_MEASURES:
      extra |= _Imports(path) & measures
    if extra:
      bad[os.path.relpath(path, ROOT)] = sorted(extra)
  assert not bad, 'lingpipe/%s imports from %s' % (package, bad)


@pytest.mark.parametrize('room', sorted(ROOMS))
def test_gpipe_rooms_import_only_the_leaves_and_each_other(room):
  bad = {}
  for path in _Files(room):
    gpipe = {name[len('lingpipe.'):] for name in _Imports(path) if name.startswith('lingpipe.gpipe.')}
    extra = {name for name in gpipe if not any(name == a or name.startswith(a + '.') for a in ROOMS[room])}
    if extra:
      bad[os.path.relpath(path, ROOT)] = sorted(extra)
  assert not bad, 'lingpipe/%s imports %s' % (room, bad)


def test_only_the_choice_steps_real_pipelines():
  """gpipe/choice sits above the PipeliningLayer it steps: nothing else of gpipe imports it."""
  bad = {os.path.relpath(path, ROOT): sorted(n for n in _Imports(path) if n.startswith('lingpipe.gpipe.choice'))
         for path in _Files('gpipe') if os.sep + 'choice' + os.sep not in path}
  bad = {path: names for path, names in bad.items() if names}
  assert not bad, bad


def test_gpipe_top_level_holds_at_most_eight_modules():
  top = glob.glob(os.path.join(ROOT, 'gpipe', '*.py'))
  assert len(top) <= 8, sorted(os.path.basename(p) for p in top)


def test_no_module_is_over_400_lines():
  paths = _Files('') + glob.glob(os.path.join(ROOT, '..', 'params', '**', '*.py'), recursive=True) + glob.glob(
      os.path.join(ROOT, '..', 'tasks', '**', '*.py'), recursive=True)
  long = {os.path.relpath(p, os.path.dirname(ROOT)): n for p in paths for n in [len(open(p).read().splitlines())]
          if n > 400}
  assert not long, long


def test_no_private_name_is_imported_across_modules():
  """`from lingpipe.x import _Name` and `module._Name` of another lingpipe module: a name used elsewhere is public."""
  found = []
  for path in _Files(''):
    tree = ast.parse(open(path).read(), path)
    modules = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (node.module or '').startswith('lingpipe'):
        found.extend('%s: from %s import %s' % (os.path.relpath(path, ROOT), node.module, a.name)
                     for a in node.names if a.name.startswith('_'))
        modules.update(a.asname or a.name for a in node.names)
      elif isinstance(node, ast.Import):
        modules.update((a.asname or a.name).split('.')[-1] for a in node.names if a.name.startswith('lingpipe'))
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules and
          node.attr.startswith('_') and not node.attr.startswith('__')):
        found.append('%s: %s.%s' % (os.path.relpath(path, ROOT), node.value.id, node.attr))
  assert not found, found


def test_no_module_imports_itself_through_others():
  """No circle among lingpipe's modules, counting imports inside functions (a package's __init__ importing its own
  modules is not one)."""
  modules = {_ModuleName(p): p for p in glob.glob(os.path.join(ROOT, '**', '*.py'), recursive=True)}
  graph = {}
  for name, path in modules.items():
    deps = set()
    for imported in _Imports(path):
      module = imported if imported in modules else imported.rpartition('.')[0]
      if module in modules and module != name and not name.startswith(module + '.'):
        deps.add(module)
    graph[name] = deps
  circles, state = [], {}

  def Visit(name, trail):
    state[name] = 'open'
    for dep in sorted(graph[name]):
      if state.get(dep) == 'open':
        circles.append(trail[trail.index(dep):] + [dep])
      elif dep not in state:
        Visit(dep, trail + [dep])
    state[name] = 'done'

  for name in sorted(graph):
    if name not in state:
      Visit(name, [name])
  assert not circles, 'import circles: %s' % ['  ->  '.join(c) for c in circles]


# What a choice is made for (the model, its layers, the engine that steps it), not the choosing: not counted.
_FOUNDATION = ('core/', 'layers/', 'model/', 'gpipe/engine/', 'gpipe/pipelining_layer.py', 'gpipe/cell_params.py',
               'gpipe/microbatch.py', 'gpipe/schedule.py', 'gpipe/plan.py', 'gpipe/timeline.py', 'native_log.py',
               'keras/', 'params/', 'tasks/')
PIPELINE_AUTO_FILES = 16  # What following --pipeline=auto crossed when last measured; issue 64 aims at 10.


def ChoicePath(choose):
  """{file under lingpipe/: the functions of other files that called into it} while choose() runs, leaving out the
  foundation (_FOUNDATION) and module loading: the files a reader follows from the trainer to its choice."""
  entered = {}

  def Rel(code):
    path = os.path.abspath(code.co_filename)
    rel = os.path.relpath(path, ROOT).replace(os.sep, '/') if path.startswith(os.path.abspath(ROOT)) else None
    return None if rel is None or rel.startswith(_FOUNDATION) else rel

  def Profile(frame, event, unused_arg):
    if event != 'call' or frame.f_back is None or frame.f_code.co_name == '<module>':
      return
    callee, caller = Rel(frame.f_code), Rel(frame.f_back.f_code)
    if callee and caller and callee != caller:
      entered.setdefault(callee, set()).add('%s:%s' % (caller, frame.f_back.f_code.co_name))

  sys.setprofile(Profile)
  try:
    choose()
  finally:
    sys.setprofile(None)
  return entered


@pytest.mark.slow
def test_following_pipeline_auto_from_the_trainer_to_its_choice(monkeypatch):
  """The trainer's choice among two local devices within a budget (this machine's process model given) enters no
  more files than when last measured, each from at most three other files, none of them in runners/ but the
  choice's own."""
  from lingpipe.memory import process_model  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import pipeline_choice  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  model = process_model.ProcessModel(300 * 2**20, 1.1)
  monkeypatch.setattr(process_model, 'Load', lambda parts=None: process_model.Calibration(
      model, model, model, 'test machine', 'today'))
  p = run_params.BuildModelParams('synthetic.DeepMlpGPipe', auto_pipeline=True)
  out = io.StringIO()
  path = ChoicePath(lambda: pipeline_choice.AmongLocalDevices(p, None, None, 2, '4GiB', out))
  assert 'chosen' in out.getvalue() and p.task.network.num_splits != 'auto', out.getvalue()
  table = '\n'.join('%d %s <- %s' % (len(c), f, ', '.join(sorted(c))) for f, c in sorted(path.items()))
  callers = {f: {c.partition(':')[0] for c in calls} for f, calls in path.items()}
  assert len(path) + 1 <= PIPELINE_AUTO_FILES, table  # and the trainer's own file
  assert all(len(c) <= 3 for c in callers.values()), table
  assert {f for f in path if f.startswith('runners/')} <= {'runners/pipeline_choice.py', 'runners/run_params.py'}, table
