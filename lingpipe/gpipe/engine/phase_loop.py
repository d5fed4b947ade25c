"""How a phase of a Plan becomes TensorFlow control flow: the ticks unrolled, except the steady ones, one loop.

The ticks where the plan repeats one pattern with the micro-batches shifted (`SteadyTicks`) run as
one `tf.while_loop` whose body is that pattern, with the micro-batch index a loop variable: the
graph size and time to first step stay nearly flat in M. Ticks before the loop run unrolled and give
every loop variable its value. A tick whose actions keep activations on a GradientTape is never
looped: a tape cannot outlive a loop iteration. GPipe's forwards under remat 'never' keep them as
data on a stack instead (step_facts.StepFacts.saves), and loop. Inside the loop a micro-batch index
is a tensor: its inputs are gathered from the stacked micro-batches (`MicroBatches`), and the index
a cell is called with is always a tensor (`Index`) so that every call shares one function.
"""

import contextlib

import tensorflow as tf

from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe.engine import tensor_lists


def SteadyTicks(phase):
  """(start, stop, step): the longest run of ticks [start, stop) in which each tick is the previous
  one with every micro-batch `step` (+1 or -1) higher: the ticks where the devices repeat one
  pattern. The executor runs ticks start+1 .. stop-1 as one loop whose body is tick start+1 with the
  micro-batches offset by a loop variable."""
  best, start, step = (0, 1, 1), 0, 0
  for t in range(1, len(phase.ticks) + 1):
    follows = None
    if t < len(phase.ticks):
      follows = next((d for d in (1, -1) if step in (0, d)
                      and phase.ticks[t] == tuple(a.Shifted(d) for a in phase.ticks[t - 1])), None)
    if follows is None:
      if t - start > best[1] - best[0]:
        best = (start, t, step or 1)
      start, step = t, 0
    else:
      step = follows
  return best


def Opaque(constant):
  """`constant`, hidden from graph optimization. Grappler specializes a function call for each
  distinct constant argument, which instantiated and optimized every (micro-batch, cell) call
  separately: time to first step grew linearly with M."""
  return tf.raw_ops.PlaceholderWithDefault(input=constant, shape=constant.shape)


def Index(m):
  """The micro-batch index argument of a cell call."""
  return Opaque(tf.constant(m, tf.int64)) if isinstance(m, int) else tf.cast(m, tf.int64)


class MicroBatches:
  """Micro-batch m, for an int m (the element of the list `micro`) or, inside the loop, a tensor m
  (a gather on `device` from `stacked`, the same micro-batches as [M, <micro-batch>] leaves; needed
  only when looped)."""

  def __init__(self, micro, stacked, device):
    self._micro, self._stacked, self._device = micro, stacked, device

  def At(self, m):
    if isinstance(m, int):
      return self._micro[m]
    with tf.device(self._device):
      return tf.nest.map_structure(lambda s: tf.gather(s, m), self._stacked)


def HostMemory(device):
  """The process whose CPU memory `device` is ('/job:worker/replica:0/task:1'; '' for this one), or
  None for a device with memory of its own (a GPU): a loop's state, kept on one device, is shared
  without copies only among the CPU devices of one process."""
  spec = tf.DeviceSpec.from_string(device or '')
  if spec.device_type not in (None, 'CPU'):
    return None
  return spec.replace(device_type=None, device_index=None).to_string()


def Loops(plan, phase, loop=True, saves=False):
  """The ticks of `phase` the executor runs as one tf.while_loop: (first, stop, step) with the loop
  running ticks first .. stop-1, or None when every tick runs unrolled (loop=False, no repeated
  pattern, or taped). `saves`: kept activations are data on a stack, not on tapes
  (step_facts.StepFacts.saves)."""
  start, stop, step = SteadyTicks(plan.Phase(phase))
  template = plan.Phase(phase).ticks[start + 1] if stop - start > 1 else ()
  taped = not saves and any(a.keep == plan_lib.KEEP_ACTIVATIONS or (a.kind == plan_lib.BACKWARD and not a.recompute)
                            for a in template)
  if not loop or stop - start < 2 or taped:
    return None
  return start + 1, stop, step


def RunPhase(plan, phase, run_action, state, looped, invariant=None):
  """state = run_action(action, micro_batch, state) for the phase's actions in plan order; `looped`:
  the ticks run as one loop (Loops, as step_facts.StepFacts holds it), whose body's micro-batches
  are tensors, or None. `invariant`: what every action reads alike (Invariant), which the loop
  carries packed."""
  ticks = plan.Phase(phase).ticks

  def Tick(actions, state, offset=None):
    state = type(state)(*[dict(field) for field in state])  # Each tick builds new dicts: loop vars stay intact.
    for a in actions:
      m = a.micro_batch if offset is None else a.micro_batch + offset
      state = run_action(a, m, state)
    return state

  if looped is None:
    for tick in ticks:
      state = Tick(tick, state)
    return state
  first, stop, step = looped
  for tick in ticks[:first]:
    state = Tick(tick, state)
  count = stop - first
  carried = invariant.Packed() if invariant else ()

  def Body(i, state, carried):
    with invariant.Unpacked(carried) if invariant else contextlib.nullcontext():
      return i + 1, Tick(ticks[first], state, i * step), carried

  # Iterations may overlap as far as the data allow, as the unrolled ticks would.
  with _NoLoopBodyControlOutputs():
    _, state, _ = tf.while_loop(lambda i, *_: i < count, Body, (tf.constant(0), state, carried),
                                parallel_iterations=count, maximum_iterations=count)
  for tick in ticks[stop:]:
    state = Tick(tick, state)
  return state


class Invariant:
  """Tensors every tick of a phase reads alike: the cells' parameters, `groups[k]` on `devices[k]`.
  use(groups) makes the actions read the given groups.

  A loop body that reads a tensor from outside captures it as one more loop variable, lowered to
  five control-flow nodes, three of which run every iteration (tensor_lists.py). The loop carries
  each group as one TensorList per dtype instead, passed on unchanged, and each iteration pops the
  tensors from it. 12-layer Transformer at K=4, remat 'always', M=32: 144 parameters captured by the
  forward pass's loop; with them packed (and each gradient sum carried once,
  executor._Interpreter.Last), 3,624 nodes in the step's graph against 4,448, as grappler counts
  them (920 at M=4, where nothing loops). The executor packs them for the forward pass only
  (executor.Backward says why).
  """

  def __init__(self, groups, devices, use):
    self._groups, self._devices, self._use = [list(g) for g in groups], list(devices), use
    # Per group, what a TensorList can hold (resource handles are captured as they are).
    self._listed = [[t for t in group if tensor_lists.Listable(t)] for group in self._groups]

  def Packed(self):
    """A loop variable: per group, {dtype name: TensorList of its tensors}."""
    return [tensor_lists.Push(None, listed, device) for listed, device in zip(self._listed, self._devices)]

  @contextlib.contextmanager
  def Unpacked(self, packed):
    """Within this block (the loop body's trace), the actions read the tensors popped from `packed`."""
    groups = []
    for group, listed, device, lists in zip(self._groups, self._listed, self._devices, packed):
      popped = iter(tensor_lists.Pop(lists, tensor_lists.Specs(listed), device)[1])
      groups.append([next(popped) if tensor_lists.Listable(t) else t for t in group])
    self._use(groups)
    try:
      yield
    finally:
      self._use(self._groups)


@contextlib.contextmanager
def _NoLoopBodyControlOutputs():
  """Within this block, a tf.while_loop's body gets no automatic control dependencies. With them,
  every loop variable of the next iteration waits for every stateful op of this one (a cell call
  with a timestamp or a stateful random op inside): the devices ran the loop in lock step, one
  cross-device control edge per iteration. The body needs none: everything it computes reaches the
  next iteration as data, and nothing in it writes a resource (its arrays are TensorLists)."""
  graph = tf.compat.v1.get_default_graph()
  saved = getattr(graph, '_add_control_dependencies', None)
  if saved is None:  # Not a tf.function's graph: nothing to turn off.
    yield
    return
  graph._add_control_dependencies = False  # pylint: disable=protected-access  # while_v2 reads it for the body.
  try:
    yield
  finally:
    graph._add_control_dependencies = saved  # pylint: disable=protected-access
