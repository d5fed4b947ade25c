"""benchmarks/commit_comparison.py: the rows it reads from pipeline_benchmark's JSON and the ratios it prints."""

import commit_comparison


def _Results(step, first):
  return {'schedules': {'dense 8 x 1024, batch 2048': {'gpipe_never': {'step_s': step}}},
          'time_to_first_step': {'never': {'4': {'total_s': first}, '32': {'total_s': 2 * first}}}}


def test_rows_name_each_schedule_row_and_first_step():
  rows = commit_comparison.Rows(_Results(1.0, 10.0))
  assert rows == {'step  dense 8 x 1024, gpipe_never': 1.0, 'first step  Transformer K=4, M=4, never': 10.0,
                  'first step  Transformer K=4, M=32, never': 20.0}


def test_ratios_are_after_over_before_of_the_medians():
  before = [commit_comparison.Rows(_Results(s, 10.0)) for s in (1.0, 1.2, 5.0)]
  after = [commit_comparison.Rows(_Results(s, 11.0)) for s in (1.1, 1.3, 0.1)]
  lines = commit_comparison.Table(before, after)
  step = next(l for l in lines if l.startswith('step  dense'))
  assert step.split()[-3:] == ['1.200', '1.100', '0.92']
  assert lines[-2] == 'step times: median ratio 0.92 (range 0.92-0.92, 1 rows)'
  assert lines[-1] == 'first steps: median ratio 1.10 (range 1.10-1.10, 2 rows)'


def test_clean_up_removes_what_it_made_and_keeps_a_planted_file(tmp_path):
  """A file of the user's in the temporary folder and one in a worktree stay, with the folders that hold them."""
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  repo = tmp_path / 'repo'
  git = lambda *a: subprocess.run(['git', '-C', str(repo), '-c', 'user.name=t', '-c', 'user.email=t@t'] + list(a),
                                  check=True, capture_output=True)
  repo.mkdir()
  git('init', '-q')
  (repo / 'a.txt').write_text('a')
  git('add', 'a.txt')
  git('commit', '-q', '-m', 'a')
  folder = tmp_path / 'made'
  folder.mkdir()
  clean, planted_in = folder / 'clean', folder / 'planted'
  for path in (clean, planted_in):
    git('worktree', 'add', '--detach', '-q', str(path), 'HEAD')
  written = folder / 'before_0.json'
  written.write_text('{}')
  (planted_in / 'mine.txt').write_text('keep')
  beside = tmp_path / 'beside.txt'
  beside.write_text('keep')
  kept = commit_comparison.CleanUp(str(folder), [str(clean), str(planted_in)], [str(written)], repo=str(repo))
  assert not os.path.exists(written) and not os.path.exists(clean)
  assert (planted_in / 'mine.txt').read_text() == 'keep' and beside.read_text() == 'keep'
  assert len(kept) == 2 and kept[0].startswith('kept the worktree %s: ' % planted_in), kept
  assert kept[1] == 'kept %s: Directory not empty' % folder
