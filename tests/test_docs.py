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
