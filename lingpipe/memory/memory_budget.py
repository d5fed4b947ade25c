"""A process's memory budget, enforced by the kernel's memory cgroup on CPUs.

`Apply(limit)` (lingpipe-train and lingpipe-worker --memory_limit, before TensorFlow loads) makes a child of the
process's memory cgroup (v1 where the machine mounts that, as many do; else v2 where it can delegate the memory
controller), sets its limit, starts a small guard process outside it (memory_guard.py), and moves the process in.
The guard outlives the process: it says in one line when the kernel killed it for its budget, leaves a verdict
that a trainer on the same host reads (`Verdict`), and removes the cgroup. A process already inside a limited
cgroup (a container, a Slurm job) takes that limit as its budget without a flag (`Inherited`). Where neither can
be had, the budget is not enforced, one line says so, and it still feeds the planner.

`--memory_limit` is defined here, once for both binaries, and read by absl's parser (FromCommandLine, before the
binary's own flags are parsed). Only the standard library, absl's flags and lingpipe.core.byte_sizes are imported:
the guard runs without TensorFlow.
"""

import json
import os
import re
import subprocess
import sys

from absl import flags

from lingpipe.core import byte_sizes
from lingpipe.memory.memory_cgroup import Budget, Inherited, MakeCgroup, WriteFile

ENV_VAR = 'LINGPIPE_MEMORY_LIMIT'  # The budget a process runs under, for the processes it starts to know.

FLAG = flags.DEFINE_string(
    'memory_limit', None, "This process's memory budget, e.g. 1.5GiB: on CPUs the kernel's memory cgroup enforces it, "
    'and a death by it is one line naming the budget (the trainer names a worker killed by its own, the last '
    "checkpoint and what fits); on a lingpipe-worker with GPUs it is each GPU's TensorFlow memory_limit. A process "
    'already in a limited cgroup (a container) takes that limit without the flag. The trainer plans with its own '
    'budget and the budgets its workers report.')


def Apply(limit, name, supervise=False):
  """Puts this process under a memory budget of `limit` bytes (None: only the inherited one, if any). Returns
  (Budget, a line to print or None). Call it before TensorFlow loads and before any thread starts: what the process
  holds before joining stays charged outside it (recent kernels move no charges), and with `supervise` the process
  forks, its parent staying outside as the guard (memory_guard.Supervise) until the child, which returns, ends."""
  budget, note = _Apply(limit, name, supervise)
  _CURRENT[:] = [budget] if budget is not None else []
  return budget, note


def _InheritedWithinMachine(name):
  """(Inherited(), a note or None): a cgroup limit above this machine's memory (a container's, set for a larger
  host) stops nothing before the machine's memory runs out, so the budget is the machine's memory, said once."""
  inherited = Inherited()
  total = byte_sizes.MachineMemory()
  if inherited is None or total is None or inherited.limit <= total:
    return inherited, None
  note = ('%s: note: the limit of %s (%s) is above this machine\'s memory (%s); the budget planned for is the '
          'machine\'s memory.' % (name, inherited.source, byte_sizes.Format(inherited.limit), byte_sizes.Format(total)))
  return inherited._replace(limit=total, source="this machine's memory (below the limit of %s)" % inherited.source,
                            enforcement=''), note


def _Apply(limit, name, supervise):
  inherited, above_machine = _InheritedWithinMachine(name)
  if limit is None:
    if inherited is not None:
      _StartGuard(inherited, name, remove=False)
    return inherited, above_machine
  if inherited is not None and inherited.limit < limit:
    return inherited, ('%s: note: --memory_limit=%s is above the limit of %s (%s), which stays the budget.' % (
        name, byte_sizes.Format(limit), inherited.source, byte_sizes.Format(inherited.limit)))
  try:
    version, folder = MakeCgroup(limit)
  except (OSError, ValueError) as e:
    why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    return (Budget(limit, '--memory_limit', ''),
            '%s: note: the budget --memory_limit=%s cannot be enforced here (%s); the planner still plans for it.' % (
                name, byte_sizes.Format(limit), why))
  budget = Budget(limit, '--memory_limit', "the kernel's memory cgroup (v%d)" % version, folder, version)
  if supervise:
    _Fork(budget, name)  # Returns in the child only.
  else:
    _StartGuard(budget, name, remove=True)
  try:
    WriteFile(os.path.join(folder, 'cgroup.procs'), str(os.getpid()))
  except OSError as e:
    return (Budget(limit, '--memory_limit', ''),
            '%s: note: the budget --memory_limit=%s cannot be enforced here (joining %s: %s); the planner still '
            'plans for it.' % (name, byte_sizes.Format(limit), folder, e.strerror))
  os.environ[ENV_VAR] = json.dumps(budget._asdict())
  return budget, None


_FACTS = []  # A stream to this process's guard, to tell it more (Tell).
_CURRENT = []  # The Budget this process runs under (Apply).
_APPLIED = []  # [True] once FromCommandLine ran.


def Current():
  """The Budget this process runs under (Apply's), or None."""
  return _CURRENT[0] if _CURRENT else None


def Limit(mesh=None, device_memory=None):
  """The bytes a process must fit, or None: `device_memory` (bytes, or text as '1.5GiB': --device_memory), else on a
  cluster (`mesh.is_remote`) the smallest budget its workers report, else this process's own (--memory_limit, or
  the limited cgroup it runs in). What each caller compares with it (a device's peak, a process's) is its own."""
  if device_memory:
    return byte_sizes.Parse(device_memory, '--device_memory') if isinstance(device_memory, str) else device_memory
  if mesh is not None and mesh.is_remote:
    return mesh.SmallestWorkerBudget()
  own = Current() or _InheritedWithinMachine('lingpipe')[0]
  return own.limit if own else None


def FromCommandLine(argv, name, supervise=False):
  """For a binary, first thing (before TensorFlow loads, so what it allocates counts): Apply() of argv's
  --memory_limit=SIZE, or of the inherited budget only; prints Apply's note on stderr. A value that does not parse
  is left to the binary's flag check. Returns the Budget or None."""
  if _APPLIED:
    return Current()
  _APPLIED.append(True)
  if _RESUME_VAR in os.environ:
    return _Resume()
  own = flags.FlagValues()  # absl's parser, over this one flag: the binary's other flags are not defined yet.
  own[FLAG.name] = flags.FLAGS[FLAG.name]  # The same Flag: its value is the binary's FLAGS.memory_limit too.
  try:
    own(list(argv), known_only=True)
  except flags.Error:
    return None  # Left to the binary's flag check, which says why in one line.
  text = own[FLAG.name].value  # The global FLAGS are not parsed yet: read it through the parser that was.
  try:
    limit = byte_sizes.ParseBudget(text, '--memory_limit') if text else None
  except ValueError:
    return None  # Left to the binary's flag check, which says why in one line.
  if limit is not None and GpuMachine():
    return None  # The binary gives each GPU the budget (TensorFlow's memory_limit) instead.
  budget, note = Apply(limit, name, supervise)
  if note:
    print(note, file=sys.stderr, flush=True)
  return budget


_RESUME_VAR = 'LINGPIPE_BUDGET_ACROSS_EXEC'  # Set by KeepAcrossExec for the process image that replaces this one.


def KeepAcrossExec():
  """Before this process re-executes itself (a worker releasing a gone trainer): the new image takes this one's
  budget and guard as they are, instead of making a cgroup and a guard of its own."""
  state = {'budget': _CURRENT[0]._asdict() if _CURRENT else None, 'facts_fd': None}
  if _FACTS:
    try:
      _FACTS[0].flush()
      fd = _FACTS[0].fileno()
      os.set_inheritable(fd, True)
      state['facts_fd'] = fd
    except (OSError, ValueError):
      pass
  os.environ[_RESUME_VAR] = json.dumps(state)


def _Resume():
  """The budget and guard stream KeepAcrossExec handed over."""
  try:
    state = json.loads(os.environ.pop(_RESUME_VAR))
    budget = Budget(**state['budget']) if state.get('budget') else None
  except (ValueError, TypeError, KeyError):
    return None
  _CURRENT[:] = [budget] if budget is not None else []
  if budget is not None and budget.cgroup and budget.version == 1:  # The peak is this image's, from now on.
    try:
      WriteFile(os.path.join(budget.cgroup, 'memory.max_usage_in_bytes'), '0')
    except OSError:
      pass
  if state.get('facts_fd') is not None:
    try:
      _FACTS[:] = [os.fdopen(state['facts_fd'], 'w')]
    except OSError:
      pass
  return budget


def GpuMachine():
  """Whether this machine has NVIDIA GPUs (their device files), read without loading TensorFlow."""
  try:
    return any(re.match(r'^nvidia\d+$', name) for name in os.listdir('/dev'))
  except OSError:
    return False


_PR_SET_PDEATHSIG = 1


def _Fork(budget, name):
  """Forks; the parent supervises the child (memory_guard.Supervise) and exits with its status, the child returns
  (after asking for SIGTERM if the parent dies) and tells the parent facts through a pipe (Tell)."""
  read_end, write_end = os.pipe()
  sys.stdout.flush()
  sys.stderr.flush()
  child = os.fork()
  if child == 0:
    os.close(read_end)
    try:
      import ctypes  # pylint: disable=g-import-not-at-top
      ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, 15, 0, 0, 0)
    except (OSError, AttributeError):
      pass
    _FACTS[:] = [os.fdopen(write_end, 'w')]
    return
  os.close(write_end)
  from lingpipe.memory import memory_guard  # pylint: disable=g-import-not-at-top
  status = memory_guard.Supervise(child, budget, name, read_end)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)  # pylint: disable=protected-access


def _StartGuard(budget, name, remove):
  guard = subprocess.Popen(
      [sys.executable, '-m', 'lingpipe.memory.memory_guard', '--pid=%d' % os.getpid(),
       '--budget=' + json.dumps(budget._asdict()), '--name=' + name] + (['--remove'] if remove else []),
      stdin=subprocess.PIPE, start_new_session=True, close_fds=True, text=True)
  _FACTS[:] = [guard.stdin]


def Tell(**facts):
  """Sends the guard what it says if this process dies of its budget: e.g. name (which task), advice (a
  configuration that fits), checkpoint (the last one, whole)."""
  if not _FACTS:
    return
  try:
    _FACTS[0].write(json.dumps(facts) + '\n')
    _FACTS[0].flush()
  except (OSError, ValueError):
    pass
