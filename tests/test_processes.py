"""core/processes.py: whether a process runs, as the lock, the leases, the guard and the temporaries ask it."""

import os
import subprocess
import sys
import time

from lingpipe.core import processes


def test_this_process_runs_and_is_itself():
  assert processes.Alive(os.getpid())
  assert processes.Alive(os.getpid(), processes.StartTime())
  assert processes.State(os.getpid()) in ('R', 'S')


def test_a_reused_pid_is_not_the_process_that_held_it():
  assert not processes.Alive(os.getpid(), str(int(processes.StartTime()) + 1))


def test_an_ended_child_is_not_alive_even_before_it_is_reaped():
  child = subprocess.Popen([sys.executable, '-c', 'pass'])
  deadline = time.time() + 30
  while processes.State(child.pid) not in ('Z', 'X', None) and time.time() < deadline:
    time.sleep(0.05)
  assert processes.State(child.pid) in ('Z', 'X', None)  # A zombie until waited for.
  assert not processes.Alive(child.pid)
  child.wait()
  assert processes.State(child.pid) is None
  assert not processes.Alive(child.pid)


def test_a_stopped_process_says_so():
  child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
  try:
    os.kill(child.pid, 19)  # SIGSTOP
    deadline = time.time() + 30
    while processes.State(child.pid) != 'T' and time.time() < deadline:
      time.sleep(0.05)
    assert processes.State(child.pid) == 'T'
    assert processes.Alive(child.pid)
  finally:
    child.kill()
    child.wait()
