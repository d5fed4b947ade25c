"""The docs stay true: links resolve, the README stays an introduction, figures live in docs/benchmarks.md (written by
the tools) and not in the code."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LINK = re.compile(r'\]\(([^)\s]+)\)')


def _Pages():
  pages = ['README.md', 'CHANGELOG.md'] + glob.glob('docs/**/*.md', root_dir=ROOT, recursive=True) + glob.glob(
      'benchmarks/**/README.md', root_dir=ROOT, recursive=True)
  return sorted(os.path.join(ROOT, p) for p in pages)


def _Anchors(path):
  """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
  text = open(path, encoding='utf-8').read()
  text = re.sub(r'```.*?```', '', text, flags=re.S)
  headings = re.findall(r'^#+ (.+)$', text, flags=re.M)
  return {re.sub(r'[^\w\- ]', '', h.strip().lower()).replace(' ', '-') for h in headings}


def test_every_relative_link_and_anchor_resolves():
  broken = []
  for page in _Pages():
    text = re.sub(r'```.*?```', '', open(page, encoding='utf-8').read(), flags=re.S)
    for target in _LINK.findall(text):
      if target.startswith(('http://', 'https://', 'mailto:')):
        continue
      path, _, anchor = target.partition('#')
      resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
      if not os.path.exists(resolved):
        broken.append('%s: %s (no such file)' % (os.path.relpath(page, ROOT), target))
      elif anchor and resolved.endswith('.md') and anchor not in _Anchors(resolved):
        broken.append('%s: %s (no such heading)' % (os.path.relpath(page, ROOT), target))
  assert not broken, '\n'.join(broken)


def test_the_readme_is_an_introduction_and_docs_has_its_four_pages():
  assert len(open(os.path.join(ROOT, 'README.md'), encoding='utf-8').read().splitlines()) <= 250
  for page in ('guide.md', 'design.md', 'reliability.md', 'benchmarks.md'):
    assert os.path.exists(os.path.join(ROOT, 'docs', page)), page


def test_no_dated_figures_in_the_library():
  dated = []
  for path in glob.glob('lingpipe/**/*.py', root_dir=ROOT, recursive=True):
    for number, line in enumerate(open(os.path.join(ROOT, path), encoding='utf-8'), 1):
      if re.search(r'\b20\d\d-\d\d-\d\d\b', line):
        dated.append('%s:%d: %s' % (path, number, line.strip()))
  assert not dated, '\n'.join(dated)


def test_every_benchmark_block_names_the_command_that_regenerates_it():
  text = open(os.path.join(ROOT, 'docs', 'benchmarks.md'), encoding='utf-8').read()
  blocks = re.findall(r'<!-- begin: (.+?) -->\n(.*?)<!-- end: ', text, flags=re.S)
  assert blocks
  for key, block in blocks:
    assert 'Command: `%s`' % key in block, key
    assert re.search(r'Commit: \w+.*; CPU: .+; \d{4}-\d\d-\d\d\.', block), key


def _Defined():
  """Every function, method and class name defined under lingpipe/, and its module names."""
  names, modules = set(), set()
  for path in glob.glob(os.path.join(ROOT, 'lingpipe', '**', '*.py'), recursive=True):
    modules.add(os.path.splitext(os.path.basename(path))[0])
    names.update(re.findall(r'^\s*(?:def|class) (\w+)', open(path, encoding='utf-8').read(), flags=re.M))
  return names, modules


def test_the_design_diagram_names_what_the_code_calls():
  """docs/design.md's "One GPipe step" draws the path of a training step: each call it names is defined, each
  module it names exists, and each file it points at is there."""
  text = open(os.path.join(ROOT, 'docs', 'design.md'), encoding='utf-8').read()
  diagram = re.search(r'## One GPipe step\n\n```\n(.*?)```', text, flags=re.S).group(1)
  names, modules = _Defined()
  calls = (re.findall(r'\b(?:(\w+)\.)?([A-Z_]\w*)\(', diagram) + re.findall(r'\b(\w+)\.([A-Z]\w+)\b', diagram) +
           [('', name) for name in re.findall(r'(?<![\w.])(_[A-Z]\w+)', diagram)])
  objects = {'task', 'layer', 'network', 'functions'}  # instances, not modules
  missing = ['%s.%s' % (owner, name) if owner else name for owner, name in calls
             if name not in names or (owner and owner not in modules | objects and owner not in names)]
  assert not missing, 'docs/design.md names what the code does not define: %s' % sorted(set(missing))
  files = re.findall(r'\b(lingpipe/[\w/]+\.py)', diagram)
  assert files and not [f for f in files if not os.path.exists(os.path.join(ROOT, f))], files
  assert 'FPropWithLoss' in diagram and 'step.Forward' in diagram
