"""Inspect: a model's params text and a table of its variables (name, shape, device, bytes)."""

import sys


def VariableTable(task):
  """Rows (name, shape, device, bytes, trainable) of every variable of the task."""
  rows = []
  for var in sorted(task.variables, key=lambda v: v.name):
    nbytes = var.shape.num_elements() * var.dtype.size
    rows.append((var.name.split(':')[0], 'x'.join(str(d) for d in var.shape) or 'scalar', var.device or '-',
                 nbytes, var.trainable))
  return rows


def Inspect(p, out=None):
  task = p.task.Instantiate()
  print('# Params of %s (dataset %s)' % (p.model, p.dataset), file=out)
  print(p.ToText(), file=out)
  rows = VariableTable(task)
  widths = [max([len(h)] + [len(str(r[i])) for r in rows]) for i, h in enumerate(('name', 'shape', 'device'))]
  print('# Variables', file=out)
  print('%-*s  %-*s  %-*s  %12s  %s' % (widths[0], 'name', widths[1], 'shape', widths[2], 'device', 'bytes',
                                        'trainable'), file=out)
  for name, shape, device, nbytes, trainable in rows:
    print('%-*s  %-*s  %-*s  %12d  %s' % (widths[0], name, widths[1], shape, widths[2], device, nbytes,
                                          'yes' if trainable else 'no'), file=out)
  trainable = sum(var.shape.num_elements() for var in task.trainable_variables)
  total_bytes = sum(r[3] for r in rows)
  print('# %d variables, %d trainable parameters, %.2f MiB' % (len(rows), trainable, total_bytes / 2**20),
        file=out, flush=True)
  return rows
