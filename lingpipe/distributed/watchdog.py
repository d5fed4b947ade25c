"""The trainer's watchdog over a cluster's workers: a step that waits on a dead or frozen worker cannot be cancelled,
so the process stops itself, naming the workers that do not answer (remote.RemoteCluster.Diagnose)."""

import os
import sys
import threading
import time


class Watchdog:
  """Stops the process when no `Beat()` comes for timeout_s while armed, naming the workers that do not answer.

  Halfway through the timeout it starts probing the workers (RemoteCluster.Diagnose, for the other half), so a
  frozen worker is named within timeout_s of the last progress. A step waiting on a hung worker cannot be cancelled,
  so the watchdog prints the error and exits the process (status 1); checkpoints are written atomically, so the
  rerun resumes from the last good one.
  """

  def __init__(self, mesh, timeout_s, last_checkpoint_fn):
    self.mesh, self.timeout_s, self.last_checkpoint_fn = mesh, timeout_s, last_checkpoint_fn
    self._last = time.time()
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._Run, daemon=True)

  def __enter__(self):
    self._last = time.time()
    self._thread.start()
    return self

  def __exit__(self, *unused):
    self._stop.set()

  def Beat(self):
    self._last = time.time()

  def _Run(self):
    half = self.timeout_s / 2
    probe_after = 0.0  # After an all-clear: when to probe again.
    while not self._stop.wait(min(1.0, self.timeout_s / 8)):
      last, now = self._last, time.time()
      if now < max(last + half, probe_after):
        continue
      # The first probe gets the rest of the timeout; a later one (after an all-clear) at least half a timeout.
      problems = self.mesh.Diagnose(max(last + self.timeout_s - now - 1.0, min(half, 10.0)))
      if self._stop.is_set() or self._last != last:
        continue  # Progress meanwhile: the step was slow, not stuck.
      if not problems:  # Everyone answers: a slow step, not a dead worker. Keep waiting, and probe again.
        probe_after = time.time() + min(half, 5.0)
        continue
      latest = self.last_checkpoint_fn()
      message = self.mesh.FailureMessage(
          problems, 'No training progress for %d s (cluster.timeout_s=%g)' % (time.time() - last, self.timeout_s),
          ' to resume from %s' % latest if latest else ' (no checkpoint was written yet)')
      print('lingpipe-train: error: %s' % message, file=sys.stderr, flush=True)
      os._exit(1)  # pylint: disable=protected-access
