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
