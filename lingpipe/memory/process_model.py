"""This machine's model of a process's memory: what a process holds beyond its devices' allocator peak, as
intercept + slope x that peak, measured once per machine (memory/calibration.py) and kept.

The allocator peak is what memory_plan predicts (weights, slots, gradients, stash, working set). A process also
holds the Python and TensorFlow runtime, its graphs, gRPC buffers, and what the allocator keeps beyond its peak.
The fit is kept in ~/.cache/lingpipe/process_memory.json (LINGPIPE_CACHE moves it) under a key of the machine
(TensorFlow, Python, CPU, kernel), so a new machine or TensorFlow is measured again.
"""

import json
import os
from typing import NamedTuple

from lingpipe.core import cpu_kernels


class ProcessModel(NamedTuple):
  """A process's peak charge = intercept + slope x the allocator peak of its devices (bytes)."""
  intercept: float
  slope: float

  def Peak(self, allocator_bytes):
    return self.intercept + self.slope * allocator_bytes


class Calibration(NamedTuple):
  trainer: ProcessModel  # the plain model's process
  worker: ProcessModel  # a lingpipe-worker holding cells
  client: ProcessModel  # a trainer beside workers (no weights of its own): intercept + slope x layers (graph)
  machine: str
  measured: str  # the date


def CachePath():
  return os.path.join(os.environ.get('LINGPIPE_CACHE') or os.path.expanduser('~/.cache/lingpipe'),
                      'process_memory.json')


def Cached():
  """Every machine's entry of the cache: {machine key: entry}."""
  try:
    with open(CachePath(), encoding='utf-8') as f:
      return json.load(f)
  except (OSError, ValueError):
    return {}


PARTS = ('trainer', 'workers')  # what Calibrate measures apart: the plain process; workers and a trainer beside them


def Load(parts=PARTS):
  """This machine's Calibration, or None where one of `parts` was never measured (the others' models are None)."""
  entry = Cached().get(cpu_kernels.MachineKey())
  if not entry:
    return None
  models = {}
  for name in ('trainer', 'worker', 'client'):
    if isinstance(entry.get(name), list):
      models[name] = ProcessModel(*entry[name])
  needed = {'trainer': ['trainer'], 'workers': ['worker', 'client']}
  if any(name not in models for part in parts for name in needed[part]):
    return None
  return Calibration(models.get('trainer'), models.get('worker'), models.get('client'), entry['machine'],
                     entry['measured'])
