"""Runs a pipeline's forward and backward passes as TensorFlow ops, tick by tick (schedule.py).

Each (micro-batch, cell) task is one call of the cell's traced function on the cell's device, so the graph holds
calls, not copies of the cells. TensorFlow's graph passes still cost time per call site in proportion to the
callee's size (measured for a 12-layer Transformer at K=4: 256 call sites at M=32 took 7 s before the first step),
so with `loop=True` the steady ticks, where every cell is busy, run as one `tf.while_loop` whose body calls each
cell once: the graph holds K(K+1)/2 + K + K(K-1)/2 calls per pass whatever M is. The fill ticks (0..K-1) and the
drain ticks run unrolled, which gives every loop variable its value before the loop starts.

Order and hand-off: a cell's next task waits for the copy of its previous output onto the next cell's device
(`HandOff`), so a device works one micro-batch at a time, in schedule order, and sends each result as soon as it
exists. The same holds in reverse for the gradients of the backward pass.

What a task needs later lives in TensorArrays on its cell's device: each cell's inputs (for the re-computing
backward), the last cell's outputs, the first cell's input gradients. Batch norm moments are summed over the
micro-batches on the cell's device and handed over once per pass.
"""

import tensorflow as tf

from lingpipe.gpipe import schedule as schedule_lib
from lingpipe.gpipe import timeline


def HandOff(structure, device):
  """`structure` copied onto `device`. The next task on the sending device waits for these copies: otherwise
  the executor may send a finished micro-batch only once the sender's later tasks are done, and the receiving
  cell idles (measured across processes: cell 1 started micro-batch 0 after cell 0 had finished all four)."""
  with tf.device(device):
    return tf.nest.map_structure(lambda t: None if t is None else tf.identity(t), structure)


def Opaque(constant):
  """`constant`, hidden from graph optimization. Grappler specializes a function call for each distinct constant
  argument, which instantiated and optimized every (micro-batch, cell) call separately: time to first step grew
  linearly with M (measured: 5.7 s at M=4, 21 s at M=16 for a 12-layer Transformer at K=4)."""
  return tf.raw_ops.PlaceholderWithDefault(input=constant, shape=constant.shape)


def Index(m):
  """The micro-batch index argument of a cell call."""
  return Opaque(tf.constant(m, tf.int64)) if isinstance(m, int) else tf.cast(m, tf.int64)


def Looped(loop, num_micro, num_cells):
  """Whether RunTicks runs a loop: asked for, and at least one tick after the fill ticks 0..K-1 is steady."""
  return loop and num_micro > num_cells


def RunTicks(tick, state, num_micro, num_cells, loop):
  """state = tick(t, state) for t = 0 .. M+K-2; with `loop` (what Looped decided), ticks K .. M-1 as one
  tf.while_loop."""
  num_ticks = num_micro + num_cells - 1
  if not loop:
    for t in range(num_ticks):
      state = tick(t, state)
    return state
  for t in range(num_cells):
    state = tick(t, state)
  # Iterations may overlap as far as the data allow, as the unrolled ticks would.
  _, state = tf.while_loop(lambda t, _: t < num_micro, lambda t, s: (t + 1, tick(t, s)),
                           (tf.constant(num_cells), state), parallel_iterations=num_micro - num_cells,
                           maximum_iterations=num_micro - num_cells)
  for t in range(num_micro, num_ticks):
    state = tick(t, state)
  return state


class MicroBatches:
  """Micro-batch m, for an int m (the element of the list `micro`) or, inside the loop, a tensor m (a gather on
  `device` from `stacked`, the same micro-batches as [M, <micro-batch>] leaves; needed only when looped)."""

  def __init__(self, micro, stacked, device):
    self._micro, self._stacked, self._device = micro, stacked, device

  def At(self, m):
    if isinstance(m, int):
      return self._micro[m]
    with tf.device(self._device):
      return tf.nest.map_structure(lambda s: tf.gather(s, m), self._stacked)


def _Write(arrays, m, structure, num_micro, device):
  """TensorArrays (one per leaf of `structure`, created on `device` on the first write) with `structure` at m."""
  leaves = tf.nest.flatten(structure)
  with tf.device(device):
    if arrays is None:
      arrays = [tf.TensorArray(t.dtype, size=num_micro, element_shape=t.shape) for t in leaves]
    written = [a.write(m, t) for a, t in zip(arrays, leaves)]
  for a in written:  # A pass that is never differentiated leaves its stash unread, by design.
    getattr(a, 'mark_used', lambda: None)()  # Only graph-mode arrays are wrapped by tf_should_use.
  return written


def _Run(recorder, times, k, m, num_micro, device, waits_for, action, stamped):
  """action(), its (start, end) written to times[k] (a TensorArray of (m, start, end) rows on `device`) when
  `recorder` is set: `stamped` actions return their own stamps as a last output (timeline.Stamped), others are
  stamped from outside (timeline.Timed, which waits for `waits_for`)."""
  if recorder is None:
    return action()
  if stamped:
    *outputs, stamps = action()
    outputs = tuple(outputs)
  else:
    outputs, stamps = timeline.Timed(device, waits_for, action)
    stamps = tf.stack(stamps)
  with tf.device(device):
    array = times[k] if k in times else tf.TensorArray(tf.float64, size=num_micro, element_shape=[3])
    times[k] = array.write(m, tf.concat([[tf.cast(m, tf.float64)], stamps], 0))
  return outputs


def _Read(arrays, m, like, device):
  with tf.device(device):
    return tf.nest.pack_sequence_as(like, [a.read(m) for a in arrays])


def Forward(cell_fns, params, devices, micro, stacked, training, stash, loop, taped=(), record=None, recorder=None,
            name=''):
  """The forward pass. cell_fns[k](inputs, index, params[k]) -> (outputs, bn moments {path: [(mean, var, weight)]}),
  and a last output, [start, end], when recording (timeline.Stamped).
  `micro`: the micro-batches, a list; `stacked`: the same as microbatch.Stacked gives them (used when Looped).

  Returns the state: {'outs': TensorArrays of the last cell's outputs, 'stash': {k: TensorArrays of cell k's
  inputs} (k >= 1, when `stash`), 'bn': {path: [[sums of w * mean, of w * (mean^2 + variance), of w]]} (w: the
  part's weight), 'like': {k: structure of cell k's inputs}, 'out_like': the structure of the outputs, 'inputs':
  the micro-batches (MicroBatches), which the backward reads again}. Tasks in `taped` (only without `loop`) run under a GradientTape
  recorded in `record[(m, k)] = (inputs, outputs, tape)`. With a timeline.Recorder, every task's timestamps are
  added to it as pipeline `name`'s forward pass.
  """
  num_cells, num_micro = len(cell_fns), len(micro)
  inputs = MicroBatches(micro, stacked, devices[0])
  like = {}

  def Tick(t, state):
    state = dict(state, carry=dict(state['carry']), stash=dict(state['stash']), bn=dict(state['bn']),
                 times=dict(state['times']))
    for k in reversed(range(num_cells)):  # Cell k reads what cell k-1 handed over at the previous tick.
      m = schedule_lib.MicroBatchAt(t, k, num_micro, num_cells)
      if m is None:
        continue
      cell_in = inputs.At(m) if k == 0 else state['carry'][k - 1]
      like.setdefault(k, cell_in)
      deps = [x for x in tf.nest.flatten(state['carry'].get(k)) if x is not None]
      call = lambda k=k, m=m, cell_in=cell_in: cell_fns[k](cell_in, Index(m), params[k])
      with tf.device(devices[k]), tf.control_dependencies(deps):
        if isinstance(m, int) and (m, k) in taped:
          tape = tf.GradientTape(watch_accessed_variables=False)
          with tape:
            tape.watch([x for x in tf.nest.flatten(cell_in) if x.dtype.is_floating])
            tape.watch(params[k])
            cell_out, stats = _Run(recorder, state['times'], k, m, num_micro, devices[k], cell_in, call, True)
          record[(m, k)] = (cell_in, cell_out, tape)
        else:
          cell_out, stats = _Run(recorder, state['times'], k, m, num_micro, devices[k], cell_in, call, True)
      if stash and k > 0:
        state['stash'][k] = _Write(state['stash'].get(k), m, cell_in, num_micro, devices[k])
      if k + 1 < num_cells:
        state['carry'][k] = HandOff(cell_out, devices[k + 1])
      else:
        state['carry'][k] = cell_out
        state['outs'] = _Write(state['outs'], m, cell_out, num_micro, devices[k])
      with tf.device(devices[k]):
        for path, parts in stats.items():
          sums = [[w * mean, w * (variance + tf.square(mean)), w] for mean, variance, w in parts]
          if path in state['bn']:
            sums = [[a + b for a, b in zip(old, new)] for old, new in zip(state['bn'][path], sums)]
          state['bn'][path] = sums
    return state

  state = RunTicks(Tick, dict(carry={}, stash={}, bn={}, outs=None, times={}), num_micro, num_cells, loop)
  state['like'], state['inputs'] = like, inputs
  state['out_like'] = state['carry'][num_cells - 1]
  if recorder is not None:
    recorder.Add(name, timeline.FORWARD, devices, [state['times'][k].stack() for k in range(num_cells)])
  return state


def BatchNormMoments(bn_sums):
  """{path: [(mean, variance, weight)]} pooled over the micro-batches from Forward's weighted sums (each
  micro-batch weighs its number of real rows, or 1 when none is padding; context.BatchNormStats)."""
  pooled = {}
  for path, parts in bn_sums.items():
    pooled[path] = []
    for sum_mean, sum_second, total in parts:
      mean = tf.math.divide_no_nan(sum_mean, total)
      pooled[path].append((mean, tf.math.divide_no_nan(sum_second, total) - tf.square(mean), total))
  return pooled


def Outputs(forward_state):
  """The last cell's outputs, stacked: a structure of [M, micro-batch ...] tensors."""
  return tf.nest.pack_sequence_as(forward_state['out_like'], [a.stack() for a in forward_state['outs']])


def Backward(backward_fns, params, zeros, devices, dy_micro, dy_stacked, forward_state, loop, taped_backward=None,
             record=None, recorder=None, name=''):
  """The backward pass, cell K-1 first. backward_fns[k](inputs, upstream, index, params[k], accumulated) ->
  (input grads, accumulated + param grads, and [start, end] when recording); zeros[k]() starts cell k's
  accumulation. `dy_micro` and `dy_stacked` are the output gradients, as `micro` and `stacked` of Forward.

  Returns (per-leaf TensorArrays of the first cell's input gradients (None for non-float leaves), {k: parameter
  gradients summed over the micro-batches}). Tasks recorded in `record` use their tape
  (`taped_backward(params, inputs, upstream, tape, outputs)` -> (input grads, param grads)). With a
  timeline.Recorder, every task's timestamps are added to it as pipeline `name`'s backward pass.
  """
  num_cells, num_micro = len(backward_fns), len(dy_micro)
  inputs = forward_state['inputs']
  upstreams = MicroBatches(dy_micro, dy_stacked, devices[-1])
  record = record or {}
  like = forward_state['like']

  def Tick(s, state):
    state = dict(state, grads=dict(state['grads']), acc=dict(state['acc']), times=dict(state['times']))
    for k in range(num_cells):  # Cell k reads what cell k+1 handed over at the previous tick.
      m = schedule_lib.MicroBatchAt(s, k, num_micro, num_cells, backward=True)
      if m is None:
        continue
      if isinstance(m, int) and (m, k) in record:
        cell_in, cell_out, tape = record[(m, k)]
      else:
        cell_in = inputs.At(m) if k == 0 else _Read(forward_state['stash'][k], m, like[k], devices[k])
        tape = None
      if k == num_cells - 1:
        upstream = upstreams.At(m)
      else:
        flat = tf.nest.flatten(like[k + 1])
        upstream = tf.nest.pack_sequence_as(like[k + 1], [state['grads'][k + 1].get(i) for i in range(len(flat))])
      deps = list(state['grads'].get(k, {}).values())
      with tf.device(devices[k]), tf.control_dependencies(deps):
        acc = state['acc'][k] if k in state['acc'] else [Opaque(z) for z in zeros[k]()]
        if tape is None:
          call = lambda k=k, m=m, cell_in=cell_in, upstream=upstream, acc=acc: backward_fns[k](
              cell_in, upstream, Index(m), params[k], acc)
        else:
          def call(k=k, cell_in=cell_in, upstream=upstream, tape=tape, cell_out=cell_out, acc=acc):
            in_grads, param_grads = taped_backward(params[k], cell_in, upstream, tape, cell_out)
            return in_grads, [a + g for a, g in zip(acc, param_grads)]
        in_grads, state['acc'][k] = _Run(recorder, state['times'], k, m, num_micro, devices[k],
                                         [cell_in, upstream, acc], call, tape is None)
      if k > 0:
        handed = HandOff(in_grads, devices[k - 1])
        state['grads'][k] = {i: g for i, g in enumerate(handed) if g is not None}
      else:
        floats = [g for g in in_grads if g is not None]
        written = _Write(state['first'], m, floats, num_micro, devices[0])
        state['first'] = written
    return state

  state = RunTicks(Tick, dict(grads={}, acc={}, first=None, times={}), num_micro, num_cells, loop)
  if recorder is not None:
    recorder.Add(name, timeline.BACKWARD, devices, [state['times'][k].stack() for k in range(num_cells)])
  arrays = iter(state['first'])
  first = [None if t is None else next(arrays) for t in _FloatOrNone(like[0])]
  return first, state['acc']


def _FloatOrNone(structure):
  return [t if t.dtype.is_floating else None for t in tf.nest.flatten(structure)]
