"""tools/handoff_cost.py: a copy between two worker processes costs the receiving process CPU time, and the tool
sees it (it runs as a subprocess: connecting to workers changes a process's TensorFlow context)."""

import json
import os
import subprocess
import sys

import pytest

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tools', 'handoff_cost.py')


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='the tool pins one worker to each of two cores')
def test_a_copy_across_processes_costs_the_receiver_cpu(tmp_path):
  out = tmp_path / 'handoff.json'
  run = subprocess.run([sys.executable, TOOL, '--mib=4', '--steps=5', '--out=%s' % out], capture_output=True,
                       text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  (size, row), = json.loads(out.read_text()).items()
  assert int(size) == 4 * 2**20
  # Reading 4 MiB off a socket into a new buffer is at least a few copies of it (about 3 ms here); had the tensor
  # not travelled (only the element the receiver reads), the receiver would have spent nothing beyond the baseline.
  assert row['receiver_ms'] > 0.2, row
  assert '4.00 MiB: sender' in run.stdout
