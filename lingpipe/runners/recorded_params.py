"""Eval, decode, export and profile of a run use the task params it was trained with.

A run trained with an override (`task.fprop_dtype='bfloat16'`, a changed `task.network.num_micro_batches`) records
it in its params.txt; the model's registered params do not have it. These modes therefore start from the registered
params, take the run's recorded `task.*` values where they differ, then apply the command's own overrides, which
win. What was taken is said in one line. Training settings (`task.train.*`) and the seed are left out: they do not
change what a checkpoint computes.
"""

from lingpipe.core import errors

_NOT_ADOPTED = ('task.train.', 'task.random_seed')


def Lines(text):
  """{path: value text} of params text 'path : value' lines."""
  lines = {}
  for line in text.splitlines():
    key, sep, value = line.partition(' : ')
    if sep and not line.startswith('#'):
      lines[key.strip()] = value
  return lines


def Adopt(p, recorded_text):
  """Sets in model params `p` the recorded `task.*` values that differ from p's. Returns (adopted 'path : value'
  lines, paths that could not be applied: no longer in the model, or a value it no longer takes)."""
  if not recorded_text:
    return [], []
  current = Lines(p.ToText())
  adopted, skipped = [], []
  for key, value in Lines(recorded_text).items():
    if not key.startswith('task.') or key.startswith(_NOT_ADOPTED) or current.get(key) == value:
      continue
    if key not in current:
      skipped.append(key)
      continue
    try:
      p.FromText('%s : %s' % (key, value))
    except errors.UserError:
      skipped.append(key)
      continue
    adopted.append('%s : %s' % (key, value))
  return adopted, skipped


def Note(p, params_path, adopted, skipped):
  """The line that says what Adopt took from `params_path` and `p` (with the command's overrides applied since)
  still holds, or None when that is nothing and nothing was skipped."""
  current = Lines(p.ToText())
  adopted = [line for line in adopted if current.get(line.split(' : ', 1)[0]) == line.split(' : ', 1)[1]]
  if not adopted and not skipped:
    return None
  parts = []
  if adopted:
    parts.append('Using the run\'s params from %s where they differ from the registered model\'s: %s' % (
        params_path, '; '.join(adopted[:6]) + ('; ...' if len(adopted) > 6 else '')))
  if skipped:
    parts.append('%s params of the run are not in this model (left as registered): %s' % (
        len(skipped), ', '.join(skipped[:4]) + (', ...' if len(skipped) > 4 else '')))
  return '. '.join(parts) + '. Override them to change this.'
