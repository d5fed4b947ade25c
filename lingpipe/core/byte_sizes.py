"""Memory sizes as users write them (--memory_limit=1.5GiB, --device_memory=16GiB) and as lingpipe prints them.
Standard library only: the memory guard uses it without TensorFlow."""

from lingpipe.core import errors

_UNITS = {'': 1, 'B': 1, 'KB': 10**3, 'MB': 10**6, 'GB': 10**9, 'TB': 10**12, 'KIB': 2**10, 'MIB': 2**20,
          'GIB': 2**30, 'TIB': 2**40}


def Parse(text, what='a memory size'):
  """'16GiB', '512MiB', '1.5GB', '2e9' -> bytes (> 0); anything else is a one-line ConfigError naming `what`."""
  text = str(text).strip()
  number = text.rstrip('bBkKmMgGtTiI')
  unit = text[len(number):].upper()
  try:
    value = int(float(number) * _UNITS[unit])
  except (KeyError, ValueError):
    value = None
  if value is None or value <= 0:
    raise errors.ConfigError('Cannot read %r as %s; expected e.g. 16GiB, 512MiB or 2e9 bytes.' % (text, what))
  return value


def Format(num_bytes):
  """'1.50 GiB', '800.00 MiB', '12 B'."""
  for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
    if num_bytes < 1024 or unit == 'TiB':
      return ('%d %s' if unit == 'B' else '%.2f %s') % (num_bytes, unit)
    num_bytes /= 1024.0
  return ''


def MachineMemory():
  """This machine's physical memory in bytes (/proc/meminfo's MemTotal), or None where it cannot be read."""
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemTotal:'):
          return int(line.split()[1]) * 1024
  except (OSError, ValueError, IndexError):
    pass
  return None


def ParseBudget(text, what):
  """Parse() of a process's memory budget on this machine: more than its physical memory is a one-line
  ConfigError (no kernel enforces it, and a planner would plan for memory that is not there)."""
  value = Parse(text, what)
  total = MachineMemory()
  if total is not None and value > total:
    raise errors.ConfigError(
        '%s=%s is more than this machine has (%s of memory); give at most %dMiB, the memory this process may use '
        'here.' % (what, str(text).strip(), Format(total), total // 2**20))
  return value
