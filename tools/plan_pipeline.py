r"""Memory planner: which pipeline configurations of a registered model fit, and which is fastest.

    python tools/plan_pipeline.py --model=image.cifar10.AmoebaNetD --devices=2 --device_memory=16GiB
    python tools/plan_pipeline.py --model=mt.multilingual.TransformerGPipe --devices=4 --device_memory=512MiB \
        --model_params_override="task.num_layers=12"

For every remat policy, K <= --devices and M in --micro_batches that divides the batch, it prints the predicted
peak memory of the fullest device (weights, gradients, optimizer slots, what the schedule stashes, one
micro-batch's working set), the bubble and the predicted speed-up over the plain model on one device, and
recommends the fastest configuration that fits the budget less 10%, as --pipeline=auto ranks them
(lingpipe/gpipe/planner/memory_plan.py says how, and what it assumes).
It builds nothing real and runs nothing: the model's layers are read from their FPropMeta and an abstract build.
With --speed_model=measured, speed-ups come from each layer's times measured on this machine instead of flops
(the layers are then built and run, at the batch's and each micro-batch's size).
The pipeline needs `input_shapes` (the registered pipelined models set them). Schedules: all of schedule.SCHEDULES
(of equal predicted speed, the one with the smaller peak is recommended).
benchmarks/gpipe_paper/plan_gpipe_paper.py checks the planner against the GPipe paper's largest Transformers.
"""

import argparse
import functools
import sys


def _Args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--model', required=True, help='A registered model, e.g. image.cifar10.AmoebaNetD.')
  parser.add_argument('--devices', type=int, default=2, help='Accelerators available: K goes up to this.')
  parser.add_argument('--device_memory', default=None, help='Memory of one device (or of one process, with '
                      '--processes), e.g. 16GiB or 1.5GiB. Without it nothing is said to fit.')
  parser.add_argument('--processes', default=None, choices=('workers', 'one', 'devices'),
                      help='What must fit in --device_memory: a lingpipe-worker process per device (a CPU cluster: '
                      'the device\'s peak plus what this machine\'s processes hold beyond their allocator, measured '
                      'once and kept; memory/calibration.py), one process holding every device (local logical '
                      'devices), or each device\'s own memory (accelerators). Default: workers on a machine without '
                      'GPUs, else devices.')
  parser.add_argument('--micro_batches', default='', help='Values of M to consider (default: the divisors of the '
                      'batch up to 32, as --pipeline=auto considers).')
  parser.add_argument('--model_params_override', default='', help='Params text applied on top of the model\'s.')
  parser.add_argument('--all', action='store_true', help='List the configurations that do not fit too.')
  parser.add_argument('--speed_model', default='flops', choices=('flops', 'measured'),
                      help='Predict speed-ups from flops, or from each layer\'s forward and backward time measured '
                      'here at the batch\'s and each micro-batch\'s size (builds the layers for real; '
                      'lingpipe/gpipe/planner/layer_times.py).')
  return parser.parse_args(argv)


def Plan(args, out=None):
  """Prints the table and the recommendation; returns (candidates, recommended or None)."""
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import ranking  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.choice import planning_view  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top

  view = planning_view.Of(run_params.BuildModelParams(args.model, override=args.model_params_override))
  pipe, layers, shapes, batch = view.params, view.layers, view.input_shapes, view.batch_size
  fprop_dtype = view.net.fprop_dtype
  device_memory = memory_plan.ParseBytes(args.device_memory) if args.device_memory else None
  micro = [int(m) for m in args.micro_batches.split(',') if m] or list(memory_plan.MicroBatchChoices(batch))
  times = None
  if args.speed_model == 'measured':
    from lingpipe.gpipe.planner import layer_times  # pylint: disable=g-import-not-at-top
    times = functools.lru_cache(maxsize=None)(lambda size: layer_times.Measure(
        layers, shapes, size, dtype=fprop_dtype, batch_dim=pipe.batch_dim, input_dtypes=pipe.input_dtypes))
  candidates = view.Candidates(args.devices, micro_batches=micro, times=times,
                               balance=pipe.balance if not pipe.cell_tpl else 'uniform')
  peak_of, where = _ProcessPeak(args, out)
  fits = (lambda c: ranking.Fits(peak_of(c), device_memory)) if device_memory else (lambda c: True)
  shown = candidates if args.all or not device_memory else [c for c in candidates if fits(c)]
  if not shown:  # Nothing fits: the smallest, so that the table says by how much.
    shown = sorted(candidates, key=peak_of)[:_SMALLEST_SHOWN]
  print('# %s: %d layers, batch %d, %d device(s)%s, weights %s, computes in %s; peak = the fullest device '
        '(MiB)%s' % (args.model, len(layers), batch, args.devices, ' of ' + args.device_memory if device_memory else '',
                     pipe.dtype.name, fprop_dtype.name, '; process = ' + where if where else ''),
        file=out)
  if times is not None:
    print('# speed-ups from layer times measured here at batch %s' % ', '.join(
        str(b) for b in sorted({batch // m for m in micro if m <= batch and batch % m == 0})), file=out)
  for line in memory_plan.Table(shown, device_memory, peak_of if where else None):
    print(line, file=out)
  if not device_memory:
    print('(No --device_memory: give the memory of a device or process to see what fits and the recommendation.)',
          file=out)
    return candidates, None
  best = ranking.Recommend(candidates, device_memory, peak_of)
  column = 'process MiB' if where else 'peak MiB'
  if best is None:
    smallest = min(candidates, key=peak_of)
    print('Nothing fits in %s less 10%%: the smallest in the %s column is %.1f MiB (%s, its fullest device %.1f MiB, '
          'shown above with the next %d smallest). Use more devices or more memory%s.' % (
              args.device_memory, column, peak_of(smallest) / 2**20, _Named(smallest), smallest.peak / 2**20,
              min(len(candidates), _SMALLEST_SHOWN) - 1,
              '' if not where else ', or --processes=devices if each device has its own memory apart from its '
              "process's"), file=out)
  else:
    print('Recommended: --model_params_override="%s"  (%.1f MiB in the %s column, of %s; predicted %.2fx the plain '
          'model)' % (best.Override(), peak_of(best) / 2**20, column, args.device_memory, best.speedup), file=out)
  return candidates, best


_SMALLEST_SHOWN = 5  # Rows shown when nothing fits.


def _Named(candidate):
  """'K=2, M=32, remat=always, 1f1b' (with v for interleaved 1F1B)."""
  schedule = candidate.schedule + (' v=%d' % candidate.virtual_stages if candidate.virtual_stages > 1 else '')
  return 'K=%d, M=%d, remat=%s, %s' % (candidate.num_splits, candidate.num_micro_batches, candidate.remat, schedule)


def _ProcessPeak(args, out):
  """(candidate -> the bytes that must fit --device_memory, a description of them or '')."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  processes = args.processes or ('devices' if tf.config.list_physical_devices('GPU') else 'workers')
  if processes == 'devices':
    return (lambda c: c.peak), ''
  from lingpipe.memory import calibration as calibration_lib  # pylint: disable=g-import-not-at-top
  calibration = calibration_lib.LoadOrCalibrate(out, ('trainer',) if processes == 'one' else ('workers',))
  if processes == 'one':
    return (lambda c: memory_plan.ProcessPeaks(c, calibration.trainer, one_process=True)[0],
            'one process holding every device (measured here %s)' % calibration.measured)
  return (lambda c: max(memory_plan.ProcessPeaks(c, calibration.worker)),
          'the fullest lingpipe-worker, one per device (measured here %s)' % calibration.measured)


def main(argv=None):
  args = _Args(argv)
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()
  return binary.RunUserErrorsAsOneLine('plan_pipeline', lambda: Plan(args), verbose=False)


if __name__ == '__main__':
  sys.exit(main())
