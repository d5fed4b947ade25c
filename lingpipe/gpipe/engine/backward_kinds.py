"""How a cell's backward gets what it differentiates, and how the forward before it keeps that: one
small strategy per kind, chosen once per action when a plan is bound (`Bind`), so the executor asks
no flags while it runs.

  re-compute        the forward kept the cell's input; the backward re-runs the forward from it, one traced call
                    (gradient_sums.SummingBackward), once its gradient has arrived;
  early re-compute  a cell's first re-computing backward, traced inline: it re-computes as soon as the device's
                    previous action has ended, while the device waits for its first gradient;
  stored tape       the forward ran on a GradientTape (KEEP_ACTIVATIONS), which the backward asks;
  saved stack       the forward returned what its backward reads as data (GPipe's remat 'never'), pushed on the
                    cell's stack where the passes loop (saved_stack.py);
  split B/W         zero bubble: the backward computes input gradients only, its WEIGHT action the weight
                    gradients later (split_backward.py).

A strategy's `Fetch` takes what the forward kept (outside the device's chain of actions), its
`Backward` computes, inside it, on the cell's device; `Keep` is the forward of a KEEP_ACTIVATIONS
action. Each timed unit of work goes through `run.Timed`, which stamps it while a timeline records;
strategies never see the stamps. Every `Backward` (and WEIGHT) adds each parameter gradient to the
cell's sum as soon as it exists (gradient_sums.py). The memory planner reads the same strategies
(`Bind`, `holds_until_weight`).
"""

from typing import Any, List, NamedTuple

import tensorflow as tf

from lingpipe.gpipe import plan as plan_lib
from lingpipe.gpipe import timeline
from lingpipe.gpipe.engine import phase_loop
from lingpipe.gpipe.engine import remat
from lingpipe.gpipe.engine import split_backward
from lingpipe.gpipe.engine import tensor_lists


class Taped(NamedTuple):
  """A stored-tape forward: what its backward differentiates."""
  inputs: Any
  outputs: Any
  tape: tf.GradientTape


class Result(NamedTuple):
  """What a backward leaves: its input gradients; [the token of the cell's gradient sum]
  (gradient_sums.py; None: the sum is left to WEIGHT); and what else the device's next action waits
  for."""
  input_grads: List[Any]
  accumulated: List[tf.Tensor] = None
  waits: List[Any] = ()


def Watch(tape, cell_in, params, wanted):
  """Inside `with tape:`, what a taped cell differentiates against: its inputs whose gradients are
  `wanted` (remat.WantsGrad) and its parameter values."""
  flat = tf.nest.flatten(cell_in)
  tape.watch([x for x, w in zip(flat, remat.WantsGrad(flat, wanted)) if w])
  tape.watch(params)


class _Recompute:
  """Re-computes from the kept input in one traced call, once the gradient has arrived."""
  name, holds_until_weight = 're-compute', False

  def Fetch(self, run, a, m, state):
    return run.KeptInput(a, m, state)

  def Backward(self, run, a, m, state, cell_in, upstream):
    cells, k = run.cells, a.cell
    acc = state.accumulated.get(k)
    call = lambda: cells.backward[k](cell_in, upstream, phase_loop.Index(m), cells.params[k], acc)
    in_grads, token = run.Timed(state, a, m, [cell_in, upstream, acc or []], call, stamped=True)
    return Result(in_grads, [token])


class _EarlyRecompute(_Recompute):
  """A cell's first re-computing backward, inline: the re-computation waits only for the device's
  previous action (the caller's control dependencies), the backward for its gradient. Later
  backwards gain nothing from it (each waits for the previous one, whose gradient came from the same
  neighbour) and stay one call each."""
  name = 'early re-compute'

  def Backward(self, run, a, m, state, cell_in, upstream):
    cells, k = run.cells, a.cell
    tape = tf.GradientTape(watch_accessed_variables=False)

    def Recompute():
      with tape:
        Watch(tape, cell_in, cells.params[k], cells.Wanted(k))
        return cells.body[k](cell_in, phase_loop.Index(m), cells.params[k], True)[0]

    cell_out = run.Timed(state, a, m, cell_in, Recompute, stamped=False, kind=timeline.RECOMPUTE)

    acc = state.accumulated.get(k)

    def Backward():
      in_grads, param_grads = cells.taped_backward(cells.params[k], cell_in, upstream, tape, cell_out,
                                                   cells.Wanted(k))
      return in_grads, [cells.sums[k].Add(param_grads, first=acc is None)]

    return Result(*run.Timed(state, a, m, [upstream, cell_out, acc or []], Backward, stamped=False))


class _StoredTape:
  """The forward runs on a tape; the backward asks it. With the loss inside the pipeline the forward
  is traced inline, so each layer's weight gradients join the sum as soon as they exist."""
  name, holds_until_weight = 'stored tape', False

  def Keep(self, run, a, m, state, cell_in):
    cells, k = run.cells, a.cell
    inline = run.loss is not None and cells.body is not None
    if inline:
      call = lambda: cells.body[k](cell_in, phase_loop.Index(m), cells.params[k], False)
    else:
      call = lambda: cells.forward[k](cell_in, phase_loop.Index(m), cells.params[k])
    tape = tf.GradientTape(watch_accessed_variables=False)
    with tape:
      Watch(tape, cell_in, cells.params[k], cells.Wanted(k))
      cell_out, moments = run.Timed(state, a, m, cell_in, call, stamped=not inline)
    run.kept.tapes[(m, k)] = Taped(cell_in, cell_out, tape)
    return cell_out, moments

  def Fetch(self, run, a, m, state):
    del state
    return run.kept.tapes.pop((m, a.cell))

  def Backward(self, run, a, m, state, taped, upstream):
    cells, k = run.cells, a.cell
    acc = state.accumulated.get(k)

    def Call():
      in_grads, param_grads = cells.taped_backward(cells.params[k], taped.inputs, upstream, taped.tape,
                                                   taped.outputs, cells.Wanted(k))
      return in_grads, [cells.sums[k].Add(param_grads, first=acc is None)]

    return Result(*run.Timed(state, a, m, [taped.inputs, upstream, acc or []], Call, stamped=False))


class _SavedStack:
  """The forward returns what its backward reads (cell_gradient.CellGradient.SavingForward): pushed
  on the cell's stack where the passes loop, kept by micro-batch where they are unrolled
  (saved_stack.Pushed)."""
  name, holds_until_weight = 'saved stack', False

  def Keep(self, run, a, m, state, cell_in):
    cells, k, device = run.cells, a.cell, run.cells.devices[a.cell]
    saved = []

    def Saving():
      outputs, tensors = cells.saving[k].SavingForward(cell_in, phase_loop.Index(m), cells.params[k])
      saved.extend(tensors)
      return outputs

    cell_out, moments = run.Timed(state, a, m, cell_in, Saving, stamped=True)
    # Every loop variable needs a value before the loop: the stacks are created by the unrolled tick
    # before it, which runs every action of the body.
    push = not isinstance(m, int) or m in run.pushed[k]
    if push or run.pushed[k]:
      varying = cells.saving[k].Varying(cell_in, cells.params[k], saved)
      state.saved[k] = tensor_lists.Push(state.saved.get(k), varying, device, push)
    if not push:
      run.kept.saves[(m, k)] = saved
    return cell_out, moments

  def Fetch(self, run, a, m, state):
    cells, k, device, like = run.cells, a.cell, run.cells.devices[a.cell], run.kept.like
    if isinstance(m, int) and m not in run.pushed[k]:
      return run.kept.saves.pop((m, k))
    saving = cells.saving[k]
    state.saved[k], varying = tensor_lists.Pop(state.saved[k], saving.VaryingSpecs(like[k], cells.params[k]), device)
    with tf.device(device):
      return saving.Restore(like[k], cells.params[k], varying)

  def Backward(self, run, a, m, state, saved, upstream):
    cells, k = run.cells, a.cell
    acc = state.accumulated.get(k)

    def Call():
      in_grads, token = cells.saving[k].SavedBackward(run.kept.like[k], phase_loop.Index(m), cells.params[k],
                                                      saved, upstream, cells.sums[k], acc, cells.Wanted(k))
      return in_grads, [token]

    return Result(*run.Timed(state, a, m, [saved, upstream, acc or []], Call, stamped=False))


class _Split:
  """B: the input gradients, re-computing the forward from the kept input or from the forward's
  recorded tapes; what the weight gradients need waits in `run.pending` for the WEIGHT action."""
  name, holds_until_weight = 'split B/W', True

  def Keep(self, run, a, m, state, cell_in):
    cells, k = run.cells, a.cell

    def Recorded():
      recorded = split_backward.Record(lambda x, params: cells.body[k](x, phase_loop.Index(m), params, False),
                                       cell_in, cells.params[k], cells.Wanted(k))
      run.kept.recorded[(m, k)] = recorded[2]
      return recorded[:2]

    return run.Timed(state, a, m, cell_in, Recorded, stamped=False)

  def Fetch(self, run, a, m, state):
    if a.recompute:
      return run.KeptInput(a, m, state)
    return run.kept.recorded.pop((m, a.cell))

  def Backward(self, run, a, m, state, kept, upstream):
    cells, k = run.cells, a.cell
    cell_in = kept if a.recompute else None

    def Call():
      recorded = kept
      if a.recompute:
        gated = remat.AfterGradient(cell_in, upstream)  # Re-compute once the gradient has arrived.
        recorded = split_backward.Record(lambda x, params: cells.body[k](x, phase_loop.Index(m), params, True),
                                         gated, cells.params[k], cells.Wanted(k))[2]
      in_grads, run.pending[(m, k)] = split_backward.InputGrads(recorded, upstream)
      return in_grads

    in_grads = run.Timed(state, a, m, [cell_in, upstream], Call, stamped=False)
    # The device's next action waits for all B computed: its input gradients, and (cell 0's inputs
    # may have none, e.g. token ids) the activation gradients it leaves for W.
    pending = run.pending[(m, k)]
    waits = [g for grads in pending.read_grads if grads for g in grads if g is not None] + [
        g for g in pending.swept if g is not None]
    return Result(in_grads, None, waits)


RECOMPUTE, EARLY_RECOMPUTE, STORED_TAPE, SAVED_STACK, SPLIT = (
    _Recompute(), _EarlyRecompute(), _StoredTape(), _SavedStack(), _Split())


def Bind(plan, saves):
  """{action: strategy} for the plan's FORWARD actions that keep their activations and every BACKWARD.

  Args:
    plan: a plan_lib.Plan.
    saves: whether kept activations are data (step_facts.StepFacts.saves), else tapes.
  """
  bound, seen, splits = {}, set(), plan.splits_backward  # splits_backward walks the plan: once.
  for phase in plan.phases:
    for tick in phase.ticks:
      for a in tick:
        if a.kind == plan_lib.BACKWARD:
          if splits:
            bound[a] = SPLIT
          elif a.recompute:
            bound[a] = RECOMPUTE if a.cell in seen else EARLY_RECOMPUTE
          else:
            bound[a] = SAVED_STACK if saves else STORED_TAPE
          seen.add(a.cell)
        elif a.kind == plan_lib.FORWARD and a.keep == plan_lib.KEEP_ACTIVATIONS:
          bound[a] = SPLIT if splits else SAVED_STACK if saves else STORED_TAPE
  return bound
