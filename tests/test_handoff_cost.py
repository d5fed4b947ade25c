"""benchmarks/handoff_cost.py: a copy between two worker processes costs the receiving process CPU time, and the tool
sees it (it runs as a subprocess: connecting to workers changes a process's TensorFlow context)."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'benchmarks', 'handoff_cost.py')


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='the tool pins one worker to each of two cores')
@pytest.mark.slow
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


@pytest.mark.skipif(not os.path.isdir('/proc/self/task'), reason='reads thread CPU times from Linux /proc')
def test_op_threads_are_told_from_the_others_by_name():
  """TensorFlow names its op pools' threads tf_<pool>; OpThreadCpuSeconds counts those alone."""
  import handoff_cost  # pylint: disable=g-import-not-at-top
  measured = threading.Event()
  spun = [threading.Event(), threading.Event()]

  def Spin(name, seconds, done):
    with open('/proc/self/task/%d/comm' % threading.get_native_id(), 'w') as f:
      f.write(name)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
      pass
    done.set()
    measured.wait()  # Alive until measured: an exited thread's time is in the process total alone.

  pid = os.getpid()
  before = handoff_cost.OpThreadCpuSeconds(pid), handoff_cost.ProcessCpuSeconds(pid)
  threads = [threading.Thread(target=Spin, args=args, daemon=True)
             for args in (('tf_test_pool', 0.3, spun[0]), ('grpc_test', 0.3, spun[1]))]
  for t in threads:
    t.start()
  assert all(done.wait(60) for done in spun)
  time.sleep(0.05)  # /proc counts in clock ticks (10 ms).
  op, total = handoff_cost.OpThreadCpuSeconds(pid) - before[0], handoff_cost.ProcessCpuSeconds(pid) - before[1]
  measured.set()
  for t in threads:
    t.join()
  # /proc's clock ticks and the threads' own clocks differ a little: the bounds tell 0.3 s from 0 and 0.6.
  assert 0.2 <= op <= 0.45 and total >= 0.5, (op, total)
