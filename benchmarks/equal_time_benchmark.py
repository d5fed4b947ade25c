r"""Test accuracy of registered models trained for the same wall-clock time, side by side, one CPU core each.

    python tools/prepare_cifar10.py --source=cifar-10-batches-py --out_dir=data/cifar10
    python benchmarks/equal_time_benchmark.py --data_dir=data/cifar10 --minutes=45 --logdir=runs/equal_time

Each model is first timed for --calibration_steps steps on its core; its run then gets the steps its measured speed
fits in --minutes (the learning-rate schedule's total_steps set to match, so each run anneals fully), and every
run trains at the same time as the others, each pinned to its own core with taskset, so that anything else on the
machine slows them alike. After training each is evaluated on the whole test split. The runs go through the
trainer binary, with each model's registered set-up plus --dtype and, with --plain (the default), the pipeline
folded into one cell of one micro-batch that stores its activations: the fastest way to train on one core, and
the same training as the pipelined model (tests/test_transparency.py). "train s" is each run's time from the
start of all the runs to its end, start-up, tracing and checkpoints included.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILDREN = []  # Every trainer this tool started: stopped when the tool ends, however it ends.

_PLAIN = "task.network.num_splits=1;task.network.num_micro_batches=1;task.network.remat='never'"


def _Args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--models', default='image.cifar10.AmoebaNetD,image.cifar10.ResNet',
                      help='Registered models, comma-separated; model i runs on core i.')
  parser.add_argument('--data_dir', required=True, help='The prepared data set (tools/prepare_cifar10.py).')
  parser.add_argument('--minutes', type=float, default=45.0, help='Training time of every run.')
  parser.add_argument('--dtype', default='bfloat16', choices=('float32', 'bfloat16'), help='task.fprop_dtype.')
  parser.add_argument('--plain', default=True, action=argparse.BooleanOptionalAction,
                      help='Train pipelined models as one cell of one micro-batch (see the docstring).')
  parser.add_argument('--calibration_steps', type=int, default=80, help='Steps of the timing run of each model.')
  parser.add_argument('--train_examples', type=int, default=50000, help='Examples in an epoch, for the table.')
  parser.add_argument('--logdir', required=True, help='A new folder: one logdir per model goes in it.')
  parser.add_argument('--write_docs', action='store_true', help='Write the table into docs/benchmarks.md.')
  return parser.parse_args(argv)


def _Override(args, extra=''):
  parts = ['input.data_dir=%r' % os.path.abspath(args.data_dir), 'task.fprop_dtype=%r' % args.dtype]
  return ';'.join(parts + ([_PLAIN] if args.plain else []) + ([extra] if extra else []))


def _Trainer(model, logdir, override, core, mode='train', max_steps=None, log_path=None):
  """Starts the trainer binary pinned to `core`; returns the Popen (its output goes to `log_path`)."""
  command = ['taskset', '-c', str(core), sys.executable, '-m', 'lingpipe.trainer', '--model=%s' % model,
             '--logdir=%s' % logdir, '--mode=%s' % mode, '--model_params_override=%s' % override]
  if max_steps:
    command.append('--max_steps=%d' % max_steps)
  with open(log_path, 'w', encoding='utf-8') as log:
    # The process outlives this function (the caller waits for it), so no `with`.
    process = subprocess.Popen(  # pylint: disable=R1732
        command, stdout=log, stderr=subprocess.STDOUT, text=True, cwd=_ROOT)
  process.log_path = log_path
  _CHILDREN.append(process)
  return process


def StopChildren(grace_s=60):
  """Stops the trainers still running (SIGTERM: each saves a checkpoint and exits; SIGKILL after `grace_s`), so
  that stopping the tool does not leave them training on their cores. Returns the number stopped."""
  running = [p for p in _CHILDREN if p.poll() is None]
  for process in running:
    process.terminate()
  for process in running:
    try:
      process.wait(grace_s)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
  return len(running)


def _Wait(processes, what):
  """Waits for all; on a failure stops the others and exits naming the failed run's log."""
  for name, process in processes:
    if process.wait() != 0:
      for _, other in processes:
        if other.poll() is None:
          other.kill()
      raise SystemExit('%s of %s failed (exit %d); its output is in %s.' % (what, name, process.returncode,
                                                                          process.log_path))


def _StepsPerSecond(log_path):
  """The speed of the last logged interval ('steps/s=' of the trainer's last step line)."""
  found = re.findall(r'steps/s=([0-9.]+)', open(log_path, encoding='utf-8').read())
  if not found:
    raise SystemExit('No step line with steps/s in %s: the calibration run logged no speed.' % log_path)
  return float(found[-1])


def _Sizes(model):
  """(trainable parameters, training batch size) of a registered model; its layers built abstractly."""
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  from lingpipe.core import base_layer  # pylint: disable=g-import-not-at-top
  p = run_params.BuildModelParams(model)
  with base_layer.AbstractVariables():
    task = p.task.Instantiate()
  return base_layer.NumParams(task), p.input.batch_size


def Run(args):
  """Calibrates, trains side by side, evaluates; prints the table and returns its rows."""
  models = [m for m in args.models.split(',') if m]
  cores = sorted(os.sched_getaffinity(0))
  if len(models) > len(cores):
    raise SystemExit('%d models need %d cores, one each; this machine gives %d. Pass fewer --models.' % (
        len(models), len(models), len(cores)))
  if shutil.which('taskset') is None:
    raise SystemExit('taskset (util-linux) is not on PATH; each run is pinned to its own core with it.')
  if not os.path.isdir(args.data_dir):
    raise SystemExit('--data_dir %s is not a folder; make it with tools/prepare_cifar10.py.' % args.data_dir)
  if os.path.exists(args.logdir) and os.listdir(args.logdir):
    raise SystemExit('--logdir %s is not empty; give a new folder (a run there would resume, not start).' %
                     args.logdir)
  os.makedirs(args.logdir, exist_ok=True)
  dirs = {m: os.path.join(args.logdir, m.replace('.', '_')) for m in models}
  # 1. The speed of each model on its core, all at once as in the real runs.
  calibration = os.path.join(args.logdir, 'calibration')
  runs = [(m, _Trainer(m, os.path.join(calibration, m), _Override(args, 'task.train.log_interval_steps=%d' % (
      args.calibration_steps // 2)), cores[i], max_steps=args.calibration_steps,
                       log_path=os.path.join(args.logdir, 'calibration_%s.log' % m))) for i, m in enumerate(models)]
  _Wait(runs, 'The calibration run')
  speed = {m: _StepsPerSecond(os.path.join(args.logdir, 'calibration_%s.log' % m)) for m in models}
  shutil.rmtree(calibration)  # Written by this tool, in the folder it was given empty.
  steps = {m: max(1, int(speed[m] * args.minutes * 60)) for m in models}
  # 2. Training, side by side.
  runs, seconds = [], {}
  started = time.time()
  for i, m in enumerate(models):
    extra = ('task.train.lr_schedule.total_steps=%d;task.train.save_interval_steps=%d;'
             'task.train.log_interval_steps=%d' % (steps[m], max(steps[m] // 4, 1), max(steps[m] // 20, 1)))
    runs.append((m, _Trainer(m, dirs[m], _Override(args, extra), cores[i], max_steps=steps[m],
                             log_path=os.path.join(args.logdir, 'train_%s.log' % m))))
  while len(seconds) < len(runs):  # Each run's own time: from the start of all to its end.
    for m, process in runs:
      if m not in seconds and process.poll() is not None:
        seconds[m] = time.time() - started
    time.sleep(0.5)
  _Wait(runs, 'Training')
  # 3. The whole test split.
  runs = [(m, _Trainer(m, dirs[m], _Override(args), cores[i], mode='eval',
                       log_path=os.path.join(args.logdir, 'eval_%s.log' % m))) for i, m in enumerate(models)]
  _Wait(runs, 'Evaluation')
  rows = []
  print('Each run on its own core, at the same time; %s compute on float32 weights; %s.' % (
      args.dtype, 'pipelines folded into one cell of one micro-batch (--plain)' if args.plain else
      'the registered pipelines'))
  print('%-28s %11s %10s %8s %9s %9s %11s %7s' % ('model', 'parameters', 'steps/s', 'steps', 'epochs',
                                                  'train s', 'test acc.', 'top-5'))
  for m in models:
    with open(os.path.join(dirs[m], 'eval_test', 'metrics.json'), encoding='utf-8') as f:
      metrics = json.load(f)['metrics']
    params, batch_size = _Sizes(m)
    examples = steps[m] * batch_size
    row = dict(model=m, params=params, steps_per_s=speed[m], steps=steps[m],
               epochs=examples / args.train_examples, train_s=seconds[m], accuracy=metrics['accuracy'],
               top5=metrics.get('top5_accuracy'), examples=metrics.get('num_examples'))
    rows.append(row)
    print('%-28s %10.2fM %10.2f %8d %9.1f %9.0f %11.4f %7.4f' % (
        m, row['params'] / 1e6, row['steps_per_s'], row['steps'], row['epochs'], row['train_s'], row['accuracy'],
        row['top5'] or float('nan')))
  print('Test split: %d examples. Budget %g minutes per run; steps from a %d-step timing run of each.' % (
      rows[0]['examples'] or 0, args.minutes, args.calibration_steps))
  return rows


def main(argv=None):
  args = _Args(argv)
  import benchmark_page  # pylint: disable=g-import-not-at-top
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  print('CPU: %s' % cpu_kernels.DescribeCpu(), flush=True)
  if args.dtype == 'bfloat16' and not cpu_kernels.OneDnnRunsBfloat16():
    print('Note: this CPU has no bfloat16 matrix units; bfloat16 convolutions and matmuls run without them, so '
          'each run trains few steps in its time. --dtype=float32 may suit this machine better.', flush=True)
  # SIGTERM (a job scheduler, `kill`) ends the tool through the `finally` below, like Ctrl-C.
  signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
  commit = benchmark_page.Commit()  # The runs start now; the code may change before the table is written.
  try:
    with benchmark_page.Recording() as recording:
      Run(args)
  finally:
    stopped = StopChildren()
    if stopped:
      print('Stopped %d trainer(s) still running; their logs and checkpoints are in %s.' % (stopped, args.logdir))
  if args.write_docs:
    benchmark_page.Write('Accuracy at equal training time', recording.Text(), cpu_kernels.DescribeCpu(),
                         commit=commit)


if __name__ == '__main__':
  main()
