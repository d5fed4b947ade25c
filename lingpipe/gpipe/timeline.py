"""The measured timeline of a pipeline step: when each (cell, micro-batch) action ran on its device.

How it is measured: timestamps in the graph. While recording, each cell's traced functions (its
forward, its re-computing backward) take a `tf.timestamp()` as their first op and another once their
outputs exist (`Stamped`): the function starts when all its inputs do, so `start` is when the action
began on its device and `end` when its results existed, in the host's wall clock (one clock for all
processes of a machine; across hosts their clocks' offset shows). The backward of a taped task (a
forward that kept its activations), a cell's first re-computing backward
(backward_kinds.EARLY_RECOMPUTE), and the actions of plans that trace cells inline (the loss inside
with remat never, zero bubble) are not one function but inline ops: their stamps wait for their
inputs and outputs from outside (`Timed`) and may run late when the device's threads are busy, and
their input gradients leave as soon as they exist, so the next cell's backward may start before such
an action's end (its weight gradients still running). In the plans that trace cells inline, a
device's next action also waits for the previous one's end stamp while recording (the executor), so
that the runtime does not interleave two actions' ops and each box is one action's time. The pair is
written to a small per-device TensorArray. The cost, paid only while recording, is two timestamps, a
few scalar reads of what they wait for, and one 3-float write per action
(benchmarks/pipeline_timeline.py prints it against a plain step); without a Recorder nothing is
added. (TensorFlow's profiler was the other way: its trace names a call only `PartitionedCallOp`,
without the function or the micro-batch, and remote workers need their own profiler servers.)

    recorder = timeline.Recorder()

    @tf.function
    def Step(x):
      with timeline.Recording(recorder):
        ...forward and backward of a model with PipeliningLayers...
      return loss, recorder.Collect()

    loss, rows = Step(x)
    events = recorder.Events(rows)
    timeline.WriteChromeTrace(events, 'step.json'); timeline.DrawGantt(events, 'step.png')
    plan = recorder.Plans()[name]  # The plan each pipeline ran: its theoretical bubble is schedule.Bubble(plan).
    print(timeline.MeasuredBubble(events), schedule.Bubble(plan))
"""

import collections
import contextlib
import json
import threading
from typing import Dict, NamedTuple

import numpy as np
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.gpipe import schedule as schedule_lib

FORWARD, BACKWARD, WEIGHT = 'forward', 'backward', 'weight'  # WEIGHT: zero bubble's deferred weight gradients
RECOMPUTE = 'recompute'  # A cell's first re-computing backward: its re-computation, before its gradient arrives.
_COLOURS = {FORWARD: '#4c72b0', BACKWARD: '#dd8452', WEIGHT: '#55a868', RECOMPUTE: '#f0b98d'}
_STATE = threading.local()

Event = collections.namedtuple('Event', 'pipeline device cell kind micro_batch start end')


class Recorder:
  """Collects the timestamps of every pipeline pass traced inside `Recording(self)`."""

  def __init__(self):
    self._passes = []  # (pipeline, kind, [(cell, device)], [per-cell [M, 3] tensors: micro-batch, start, end])
    self._plans = {}

  def Reset(self):
    self._passes, self._plans = [], {}

  def Add(self, pipeline, kind, devices, rows, plan=None, cells=None):
    """One pass (kind FORWARD, BACKWARD, WEIGHT or RECOMPUTE) of `pipeline` (a name) over `devices`
    (one per cell): rows[k] is cell k's [M, 3] float64 tensor of (micro-batch, start, end); `plan`,
    the plan.Plan it ran; `cells`, the cells the rows and devices are of, when not all (default: 0
    .. len(rows)-1)."""
    cells = list(range(len(rows))) if cells is None else list(cells)
    self._passes.append((pipeline, kind, list(zip(cells, devices)), list(rows)))
    if plan is not None:
      self._plans[pipeline] = plan

  def Plans(self):
    """{pipeline: the plan.Plan it ran}."""
    return dict(self._plans)

  def Collect(self):
    """The recorded tensors, to return from the step function (a list: one [K, M, 3] tensor per pass)."""
    if not self._passes:
      raise errors.ConfigError('The timeline recorded nothing: no PipeliningLayer ran a pipeline (K > 1 or M > 1) '
                               'inside timeline.Recording().')
    return [tf.stack(rows) for _, _, _, rows in self._passes]

  def Events(self, collected):
    """Events, ordered by start time, of the numpy (or tensor) values Collect() gave."""
    events = []
    for (pipeline, kind, cells, _), values in zip(self._passes, collected):
      values = np.asarray(values)
      for i, (k, device) in enumerate(cells):
        for m, start, end in values[i]:
          events.append(Event(pipeline, device, k, kind, int(m), float(start), float(end)))
    return sorted(events, key=lambda e: (e.start, e.cell))


@contextlib.contextmanager
def Recording(recorder):
  """Within this block (while tracing a step), pipelines record their actions' timestamps into `recorder`."""
  recorder.Reset()  # A new trace starts a new record.
  stack = getattr(_STATE, 'stack', [])
  _STATE.stack = stack + [recorder]
  try:
    yield recorder
  finally:
    _STATE.stack = stack


def Current():
  """The active Recorder, or None (the executor then records nothing)."""
  stack = getattr(_STATE, 'stack', [])
  return stack[-1] if stack else None


_CLOCKS = {}


def _Clock(device):
  """A traced function clock(after) returning tf.timestamp() on `device` once the float64 scalar
  `after` exists. tf.function orders every stateful op that takes no resource in program order,
  across devices: plain timestamp ops serialized the whole pipeline (measured: cell 0's forward of
  micro-batch 1 waited for cell 1's of micro-batch 0). This function reads a variable of its own
  device, so it is ordered only with writes of that variable (there are none) and costs no transfer.
  Its call is inlined when the graph runs, so the cheap ops run on the thread that finished what
  they wait for; a call kept whole waited for a free inter-op thread and stamped actions late. Once
  inlined, the call's control edges no longer hold its timestamp (an end stamp waiting so could be
  taken before an inline forward had run), so what a stamp waits for comes in as data (`_Touch`),
  and what waits for a stamp reads its value (`_After`)."""
  if device not in _CLOCKS:
    with tf.init_scope(), tf.device(device):
      anchor = tf.Variable(0.0, trainable=False, name='timeline_clock_anchor')

    def Clock(after):
      # The stamp hangs off a Switch's output, as a branch of a cond does: graph optimization keeps
      # that control edge. `after` is never negative (_Touch), so the branch is always live (NaN < 0
      # is false too). A functional tf.cond would be kept too, but across processes runs each branch
      # as a function call, which is slow.
      _, taken = tf.raw_ops.Switch(data=after, pred=tf.logical_not(after < 0.0))
      with tf.control_dependencies([tf.identity(taken), anchor.read_value()]):
        return tf.timestamp()

    _CLOCKS[device] = tf.function(Clock, autograph=False)
  return _CLOCKS[device]


def _Touch(waits_for):
  """A float64 scalar, never negative, computed from one element of each tensor of `waits_for`
  (tensors or ops, a structure): it exists only once they all do, and costs a few scalar ops."""
  parts, ops = [], []
  for t in tf.nest.flatten(waits_for):
    if isinstance(t, tf.Operation) or (t is not None and t.dtype in (tf.resource, tf.variant, tf.string)):
      ops.append(t if isinstance(t, tf.Operation) else t.op)
    elif t is not None:
      with tf.device(t.device or None):  # On the tensor's device (a hand-off's is another's): a scalar travels.
        parts.append(tf.reduce_sum(tf.abs(tf.cast(tf.reshape(t, [-1])[:1], tf.float64))))
  with tf.control_dependencies(ops):  # The rest (a TensorArray's flow, ops) by control edges, outside the clock.
    return tf.add_n(parts + [tf.zeros([], tf.float64)])


def _After(stamp):
  """An op reading `stamp`'s value, for what must wait for the stamp itself: a data edge, which
  holds whatever graph optimization does with the clock's call (_Clock)."""
  return tf.identity(stamp)


def Stamped(device, body):
  """Inside a traced function: (outputs of body(), (start, end)), `start` taken before anything of
  the body runs (the function starts once all its inputs exist) and `end` once its outputs do, on
  the thread that made them."""
  clock = _Clock(device)
  start = clock(tf.zeros([], tf.float64))
  with tf.control_dependencies([_After(start)]):
    outputs = body()
  end = clock(_Touch(outputs))
  return outputs, tf.stack([start, end])


def Timed(device, waits_for, action):
  """(outputs of action(), (start, end)) with the action's call and both timestamps on `device`;
  `start` waits for `waits_for` (tensors or ops), the call for `start`, `end` for the outputs."""
  clock = _Clock(device)
  with tf.device(device):
    start = clock(_Touch(waits_for))
    with tf.control_dependencies([_After(start)]):
      outputs = action()
    end = clock(_Touch(outputs))
  return outputs, (start, end)


# -- analysis
# ------------------------------------------------------------------------------------------------------
def IdleFractions(events):
  """For each pipeline, the fraction of the step (first start to last end, all devices) each device
  was idle: {pipeline: {device: fraction}}. With unequal cells the busiest device's idle is the
  schedule's own bubble (it sets the pace); what the others idle beyond it is waiting for the slower
  cell."""
  result = {}
  for pipeline in sorted({e.pipeline for e in events}):
    own = [e for e in events if e.pipeline == pipeline]
    span = max(e.end for e in own) - min(e.start for e in own)
    result[pipeline] = {}
    for device in sorted({e.device for e in own}):
      busy = _Union([(e.start, e.end) for e in own if e.device == device])
      result[pipeline][device] = 1.0 - busy / span if span > 0 else 0.0
  return result


def MeasuredBubble(events):
  """The mean over devices of IdleFractions, for each pipeline: {pipeline: fraction}."""
  return {pipeline: float(np.mean(list(idle.values()))) for pipeline, idle in IdleFractions(events).items()}


def ActionTimes(events):
  """The median length of each kind of action (FORWARD, BACKWARD, WEIGHT) of each cell, for each
  pipeline: {pipeline: {(kind, cell): seconds}}, what schedule.Simulate takes as `costs`. A
  re-computing backward's length includes its re-computation, except a cell's first (its RECOMPUTE
  event), which the median leaves out."""
  lengths = {}
  for e in events:
    if e.kind != RECOMPUTE:
      lengths.setdefault(e.pipeline, {}).setdefault((e.kind, e.cell), []).append(e.end - e.start)
  return {pipeline: {key: float(np.median(values)) for key, values in times.items()}
          for pipeline, times in lengths.items()}


def Overlap(events):
  """For each pipeline, how much longer its devices' actions are summed than the time they cover (0:
  one action at a time on each device). Above a few percent, ActionTimes are stretched by sharing
  the device, and a plan simulated with them is no guide (in one process a device's taped backwards
  can still overlap, although each waits for its predecessor's gradient sum)."""
  result = {}
  for pipeline in sorted({e.pipeline for e in events}):
    own = [e for e in events if e.pipeline == pipeline]
    summed = sum(e.end - e.start for e in own)
    covered = sum(_Union([(e.start, e.end) for e in own if e.device == d]) for d in {e.device for e in own})
    result[pipeline] = summed / covered - 1.0 if covered > 0 else 0.0
  return result


OVERLAP_NO_GUIDE = 0.05  # Overlap above which a plan simulated with ActionTimes is no guide.


def MedianRun(runs):
  """The events of the recorded step (one list of events per step in `runs`) whose span is the median."""
  spans = [max(e.end for e in events) - min(e.start for e in events) for events in runs]
  return runs[int(np.argsort(spans)[len(spans) // 2])]


class Explained(NamedTuple):
  """A pipeline's plan run with its measured action times (PlanWithMeasuredTimes)."""
  bubble: float  # the plan's bubble with those times (schedule.Simulate)
  overlap: float  # Overlap of the step: above OVERLAP_NO_GUIDE the bubble is no guide
  times: Dict  # {(kind, cell): median seconds}, ActionTimes over all recorded steps

  def Warning(self):
    """A sentence saying the simulated bubble is no guide, or None."""
    if self.overlap <= OVERLAP_NO_GUIDE:
      return None
    return ('actions overlapped on a device (summed %.2fx the time they cover), which stretches their times: the '
            'plan with them is no guide here' % (1 + self.overlap))


def PlanWithMeasuredTimes(runs, events, plans):
  """{pipeline: Explained}: its plan (`plans`, Recorder.Plans) run with the median action times of
  all recorded steps `runs`, and the Overlap of the step `events`. The bubble's gap to
  schedule.Bubble is unequal cells and actions; to the measured, waits between actions."""
  times = ActionTimes([e for r in runs for e in r])
  overlap = Overlap(events)
  return {pipeline: Explained(schedule_lib.Simulate(plans[pipeline], costs=times[pipeline])[1], overlap[pipeline],
                              times[pipeline])
          for pipeline in times}


def _Lanes(events):
  """A lane for each event (events sorted by start) such that events of one lane do not overlap: a
  device whose actions overlap in time shows them side by side instead of one over the other."""
  ends, lanes = [], []
  for e in events:
    lane = next((i for i, end in enumerate(ends) if end <= e.start), len(ends))
    if lane == len(ends):
      ends.append(e.end)
    ends[lane] = e.end
    lanes.append(lane)
  return lanes or [0]


def _Union(intervals):
  """Total length covered by the intervals (overlapping ones counted once)."""
  total, current = 0.0, None
  for start, end in sorted(intervals):
    if current is None or start > current[1]:
      if current is not None:
        total += current[1] - current[0]
      current = [start, end]
    else:
      current[1] = max(current[1], end)
  return total + (current[1] - current[0] if current else 0.0)


# -- outputs
# -------------------------------------------------------------------------------------------------------
def ChromeTrace(events):
  """The events as a Chrome trace (chrome://tracing, Perfetto): one process per pipeline, one thread per device."""
  origin = min(e.start for e in events)
  pipelines = sorted({e.pipeline for e in events})
  trace = []
  for p, pipeline in enumerate(pipelines):
    trace.append(dict(name='process_name', ph='M', pid=p, tid=0, args=dict(name=pipeline)))
    devices = sorted({(e.cell, e.device) for e in events if e.pipeline == pipeline})
    for cell, device in devices:
      trace.append(dict(name='thread_name', ph='M', pid=p, tid=cell, args=dict(name='cell %d on %s' % (cell,
                                                                                                     device))))
  for e in events:
    trace.append(dict(name='%s %d' % (e.kind[0].upper(), e.micro_batch), cat=e.kind, ph='X',
                      ts=(e.start - origin) * 1e6, dur=(e.end - e.start) * 1e6, pid=pipelines.index(e.pipeline),
                      tid=e.cell, args=dict(micro_batch=e.micro_batch, device=e.device)))
  return dict(traceEvents=trace, displayTimeUnit='ms')


def WriteChromeTrace(events, path):
  with open(path, 'w') as f:
    json.dump(ChromeTrace(events), f)


def ShortDevice(device):
  """'/job:worker/replica:0/task:1/device:CPU:0' -> 'task:1/CPU:0'; a local device -> 'CPU:1'."""
  parts = device.split('/')
  name = parts[-1].replace('device:', '')
  task = [p for p in parts if p.startswith('task:')]
  return '%s/%s' % (task[0], name) if task and '/job:localhost/' not in device else name


def DrawGantt(events, path, title=''):
  """A PNG Gantt chart: a row per device, forward and backward actions in two colours with their
  micro-batch numbers (m:c, c the cell, where a device runs several cells), idle time shaded."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use('Agg')
    from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise errors.ConfigError('Drawing the timeline needs matplotlib: pip install matplotlib (or lingpipe[test]).') \
        from e
  origin = min(e.start for e in events)
  first_cell = {}
  for e in events:
    first_cell[(e.pipeline, e.device)] = min(e.cell, first_cell.get((e.pipeline, e.device), e.cell))
  rows = sorted(first_cell, key=lambda row: (row[0], first_cell[row]))  # (pipeline, device), in cell order.
  span_ms = (max(e.end for e in events) - origin) * 1e3
  figure, axes = pyplot.subplots(figsize=(12, 0.6 * len(rows) + 1.4))
  labels = []
  for y, (pipeline, device) in enumerate(rows):
    axes.barh(y, span_ms, left=0, height=0.8, color='#e8e8e8')  # Idle unless an action covers it.
    own = [e for e in events if (e.pipeline, e.device) == (pipeline, device)]
    cells = sorted({e.cell for e in own})
    lanes = _Lanes(own)
    height = 0.8 / (max(lanes) + 1)
    for e, lane in zip(own, lanes):
      left, width = (e.start - origin) * 1e3, (e.end - e.start) * 1e3
      centre = y - 0.4 + height * (lane + 0.5)
      axes.barh(centre, width, left=left, height=height, color=_COLOURS[e.kind],
                edgecolor='white', linewidth=0.5)
      if width > span_ms / 150:
        text = str(e.micro_batch) if len(cells) == 1 else '%d:%d' % (e.micro_batch, e.cell)
        axes.text(left + width / 2, centre, text, ha='center', va='center', fontsize=7, color='white')
    labels.append('cell%s %s (%s)' % ('s' if len(cells) > 1 else '', ','.join(map(str, cells)), ShortDevice(device))
                  + ('' if len({r[0] for r in rows}) == 1 else ' ' + pipeline))
  axes.set_yticks(range(len(rows)))
  axes.set_yticklabels(labels)
  axes.invert_yaxis()
  axes.set_xlabel('ms since the first action')
  axes.set_xlim(0, span_ms)
  bubble = ', '.join('%.3f' % b for b in MeasuredBubble(events).values())
  shown = {e.kind for e in events}
  kinds = 'forward (blue), backward (orange), ' + ('re-computation (light orange), ' if RECOMPUTE in shown else '') \
      + ('weight gradients (green), ' if WEIGHT in shown else '')
  axes.set_title((title + '\n' if title else '') + kinds + 'idle (grey); measured bubble %s' % bubble, fontsize=9)
  figure.tight_layout()
  figure.savefig(path, dpi=110, format='png')  # By name: `path` may be a temporary without the extension.
  pyplot.close(figure)
