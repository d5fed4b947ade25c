"""The kernel's memory cgroup, read and made with the standard library alone: the Budget a process runs under,
the cgroup it is in and the limit it inherits, its usage, a child cgroup made for a budget, and the verdict file
the guard leaves (memory_budget.py applies budgets; memory_guard.py watches them).
"""

import json
import os
import re
from typing import NamedTuple, Optional

from lingpipe.core import byte_sizes
from lingpipe.core import processes

PREFIX = 'lingpipe-'  # Cgroups made here are named lingpipe-<pid>; a dead pid's empty one is removed by the next.
UNLIMITED = 1 << 60  # A cgroup limit at or above this is "no limit" (v1 reports 2^63 rounded to pages).


class Budget(NamedTuple):
  """A process's memory budget: `limit` bytes (None: none known), where it came from, how it is enforced."""
  limit: Optional[int]
  source: str  # '--memory_limit' or 'its cgroup <path>'; '' without a budget
  enforcement: str  # "the kernel's memory cgroup (v1)", or '' where nothing enforces it
  cgroup: Optional[str] = None  # the folder of the memory cgroup that holds it
  version: int = 0  # that cgroup's version

  def Describe(self):
    if self.limit is None:
      return 'no memory budget'
    return '%s (%s; %s)' % (byte_sizes.Format(self.limit), self.source,
                            'enforced by %s' % self.enforcement if self.enforcement else 'not enforced')


# -- finding the memory cgroup -------------------------------------------------------------------------------------
def _Read(path):
  try:
    with open(path) as f:
      return f.read()
  except OSError:
    return None


def OwnCgroup(pid='self'):
  """(version, folder) of the memory cgroup process `pid` runs in, or (0, None) where there is none to use."""
  groups = _Read('/proc/%s/cgroup' % pid) or ''
  mounts = _Read('/proc/self/mountinfo') or ''
  paths = {}
  for line in groups.splitlines():
    parts = line.split(':', 2)
    if len(parts) == 3:
      if parts[1] == '':
        paths[2] = parts[2]
      elif 'memory' in parts[1].split(','):
        paths[1] = parts[2]
  for version in (1, 2):
    if version not in paths:
      continue
    for line in mounts.splitlines():
      fields = line.split()
      if ' - ' not in line:
        continue
      after = line.split(' - ', 1)[1].split()
      fstype, options = after[0], after[2] if len(after) > 2 else ''
      if (version == 1 and fstype == 'cgroup' and 'memory' in options.split(',')) or (
          version == 2 and fstype == 'cgroup2'):
        root, mount_point = fields[3], fields[4]
        path = paths[version]
        if not path.startswith(root):
          continue
        folder = os.path.normpath(mount_point + '/' + path[len(root):])
        if version == 2 and 'memory' not in (_Read(os.path.join(folder, 'cgroup.controllers')) or '').split():
          continue
        return version, folder
  return 0, None


def _LimitFile(version):
  return 'memory.limit_in_bytes' if version == 1 else 'memory.max'


def _Limit(version, folder):
  text = (_Read(os.path.join(folder, _LimitFile(version))) or '').strip()
  if not text or text == 'max':
    return None
  value = int(text)
  return value if value < UNLIMITED else None


def Inherited(pid='self'):
  """The Budget of the limited memory cgroup this process already runs in (its own or an ancestor's, the smallest
  up to the mount's root), or None."""
  version, folder = OwnCgroup(pid)
  if folder is None:
    return None
  best, where, current = None, None, folder
  while True:
    limit = _Limit(version, current)
    if limit is not None and (best is None or limit < best):
      best, where = limit, current
    parent = os.path.dirname(current)
    if parent == current or not os.path.exists(os.path.join(parent, _LimitFile(version))):
      break
    current = parent
  if best is None:
    return None
  return Budget(best, 'its cgroup %s' % where, "the kernel's memory cgroup (v%d)" % version, folder, version)


def Usage(budget):
  """{'current', 'peak', 'oom_kills'} bytes of the cgroup holding `budget` (None where unknown)."""
  out = {'current': None, 'peak': None, 'oom_kills': None}
  if budget is None or budget.cgroup is None:
    return out
  files = (('memory.usage_in_bytes', 'memory.max_usage_in_bytes', 'memory.oom_control') if budget.version == 1 else
           ('memory.current', 'memory.peak', 'memory.events'))
  for key, name in zip(('current', 'peak'), files[:2]):
    text = _Read(os.path.join(budget.cgroup, name))
    out[key] = int(text) if text and text.strip().isdigit() else None
  m = re.search(r'^oom_kill (\d+)$', _Read(os.path.join(budget.cgroup, files[2])) or '', re.M)
  out['oom_kills'] = int(m.group(1)) if m else None
  return out


def Charge(pid):
  """Bytes process `pid` holds that its memory cgroup cannot reclaim without hurting it: anonymous memory and
  mapped file pages (its libraries' code), read from its cgroup's memory.stat; page cache it merely wrote (a
  checkpoint) is left out, as the kernel reclaims that before it kills. Without a cgroup: its RSS. None if gone."""
  version, folder = OwnCgroup(pid)
  stat = _Read(os.path.join(folder, 'memory.stat')) if folder else None
  charge = StatCharge(stat, version) if stat else None
  if charge is not None:
    return charge
  m = re.search(r'^VmRSS:\s+(\d+) kB', _Read('/proc/%s/status' % pid) or '', re.M)
  return int(m.group(1)) * 1024 if m else None


def StatCharge(stat, version):
  """Anonymous memory plus mapped file pages, in bytes, from the text of a cgroup's memory.stat (None if it lacks
  them): what Charge counts, leaving out the page cache a process merely wrote."""
  fields = dict(line.split() for line in stat.splitlines() if len(line.split()) == 2)
  keys = ('rss', 'mapped_file') if version == 1 else ('anon', 'file_mapped')
  if not all(k in fields and fields[k].isdigit() for k in keys):
    return None
  return sum(int(fields[k]) for k in keys)


def OutsideOwnBudget(budget):
  """The cgroup.procs file of the cgroup holding `budget`'s, where lingpipe made that one for this process
  (lingpipe-<pid>): a child written there runs outside this process's budget, as a measurement of the machine must
  (memory_trials.py). None for no budget, or one this process inherited (a container's), which nothing escapes."""
  if budget is None or not budget.cgroup or not os.path.basename(budget.cgroup).startswith(PREFIX):
    return None
  procs = os.path.join(os.path.dirname(budget.cgroup), 'cgroup.procs')
  return procs if os.access(procs, os.W_OK) else None


# -- making one ------------------------------------------------------------------------------------------------
def WriteFile(path, text):
  with open(path, 'w') as f:
    f.write(text)


def RemoveStale(parent):
  """Removes the empty cgroups under `parent` that a lingpipe process (now dead) made. Returns their names."""
  removed = []
  try:
    names = os.listdir(parent)
  except OSError:
    return removed
  for name in names:
    m = re.match(r'^%s(\d+)$' % PREFIX, name)
    path = os.path.join(parent, name)
    if not m or processes.Alive(int(m.group(1))) or (_Read(os.path.join(path, 'cgroup.procs')) or '').strip():
      continue
    try:
      os.rmdir(path)
      removed.append(name)
    except OSError:
      pass
  return removed


def MakeCgroup(limit):
  """(version, folder) of a new child cgroup of this process's, limited to `limit` bytes; raises OSError, or
  ValueError with the reason where the machine has no memory cgroup to use."""
  version, own = OwnCgroup()
  if own is None:
    raise ValueError('this machine has no memory cgroup this process can use (neither v1 nor v2 with the memory '
                     'controller)')
  RemoveStale(own)
  folder = os.path.join(own, '%s%d' % (PREFIX, os.getpid()))
  if version == 2:
    controls = _Read(os.path.join(own, 'cgroup.subtree_control')) or ''
    if 'memory' not in controls.split():
      WriteFile(os.path.join(own, 'cgroup.subtree_control'), '+memory')  # EBUSY where own holds processes.
  os.makedirs(folder, exist_ok=True)
  try:
    if version == 1:
      try:  # What it holds already moves along, where the kernel still can (recent ones cannot: call Apply early).
        WriteFile(os.path.join(folder, 'memory.move_charge_at_immigrate'), '3')
      except OSError:
        pass
      WriteFile(os.path.join(folder, 'memory.limit_in_bytes'), str(limit))
      if os.path.exists(os.path.join(folder, 'memory.memsw.limit_in_bytes')):
        try:  # No escape into swap, where the kernel accounts it.
          WriteFile(os.path.join(folder, 'memory.memsw.limit_in_bytes'), str(limit))
        except OSError:
          pass
    else:
      WriteFile(os.path.join(folder, 'memory.max'), str(limit))
      if os.path.exists(os.path.join(folder, 'memory.swap.max')):
        WriteFile(os.path.join(folder, 'memory.swap.max'), '0')
  except BaseException:
    os.rmdir(folder)
    raise
  return version, folder


# -- what the guard leaves for a trainer on the same host ------------------------------------------------------------
def VerdictPath(pid):
  return os.path.join('/tmp', 'lingpipe-memory-%d' % os.getuid(), '%d.json' % pid)


def Verdict(pid):
  """The guard's verdict on process `pid` of this host ({'oom_killed', 'limit', 'peak', ...}), or None."""
  text = _Read(VerdictPath(pid))
  try:
    return json.loads(text) if text else None
  except ValueError:
    return None
