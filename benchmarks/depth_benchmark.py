r"""Time to first step, peak RSS and exit time of the registered NMT Transformer over its depth, as a user meets
them: does what the trainer traces stay flat as the model deepens?

    python benchmarks/depth_benchmark.py                                   # 2, 8, 32 and 64 layers
    python benchmarks/depth_benchmark.py --layers=2,8 --configs=k2m4 --write_docs

Each run is `lingpipe-train --model=mt.multilingual.TransformerGPipe` in a fresh process for 3 steps with
task.num_layers=L (encoder and decoder each) in one configuration: K=2 at M=4 or M=16 (remat always, as
registered) or the plain model (K=1, M=1, remat never). Time to first step is from the trainer's "Training ..."
line to its "step 1/" line (tracing, graph optimization and the first step); peak RSS is the process's maximum
resident set (wait4); exit time is from its last line to its exit. Runs alternate over the depths, one process at a
time; the machine's load is the reader's to keep quiet.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import benchmark_page

CONFIGS = {
    'k2m4': 'task.network.num_splits=2;task.network.num_micro_batches=4',
    'k2m16': 'task.network.num_splits=2;task.network.num_micro_batches=16',
    'plain': "task.network.num_splits=1;task.network.num_micro_batches=1;task.network.remat='never'",
}
MODEL = 'mt.multilingual.TransformerGPipe'


def _Args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--layers', default='2,8,32,64', help='Depths (layers of the encoder and of the decoder).')
  parser.add_argument('--configs', default='k2m4,k2m16,plain', help='Of: %s.' % ', '.join(CONFIGS))
  parser.add_argument('--timeout_s', type=float, default=1800, help='A run taking longer is stopped and shown so.')
  parser.add_argument('--write_docs', action='store_true', help='Write the table into docs/benchmarks.md.')
  return parser.parse_args(argv)


def Run(layers, config, timeout_s):
  """{'first_step_s', 'peak_rss_mib', 'exit_s'} of one training run, or {'failed': its last line}."""
  logdir = tempfile.mkdtemp(prefix='lingpipe-depth-')
  override = 'task.num_layers=%d;%s;task.train.log_interval_steps=1;task.train.save_interval_steps=1000' % (
      layers, CONFIGS[config])
  command = [sys.executable, '-m', 'lingpipe.trainer', '--model=' + MODEL, '--logdir=' + logdir, '--max_steps=3',
             '--model_params_override=' + override]
  process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  started = first = last = None
  lines = []
  deadline = time.time() + timeout_s
  try:
    for line in process.stdout:
      now = time.time()
      lines.append(line.rstrip())
      last = now
      if line.startswith('Training ') and started is None:
        started = now
      elif line.startswith('step 1/') and first is None:
        first = now
      if now > deadline:
        process.kill()
        break
    _, status, usage = os.wait4(process.pid, 0)
    ended = time.time()
  finally:
    subprocess.run(['rm', '-rf', logdir], check=False)
  if os.waitstatus_to_exitcode(status) != 0 or started is None or first is None:
    return {'failed': (lines or [''])[-1][:100]}
  return {'first_step_s': first - started, 'peak_rss_mib': usage.ru_maxrss / 1024.0, 'exit_s': ended - last}


def main(argv=None):
  args = _Args(argv)
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  depths = [int(x) for x in args.layers.split(',')]
  configs = args.configs.split(',')
  commit = benchmark_page.Commit()
  with benchmark_page.Recording() as printed:
    print('%s, 3 steps a run, one process at a time; %s' % (MODEL, cpu_kernels.DescribeCpu()))
    print('%-8s %6s %16s %14s %8s' % ('config', 'layers', 'first step s', 'peak RSS MiB', 'exit s'))
    results = {}
    for config in configs:
      for depth in depths:
        result = results[config, depth] = Run(depth, config, args.timeout_s)
        if 'failed' in result:
          print('%-8s %6d  failed: %s' % (config, depth, result['failed']), flush=True)
          continue
        print('%-8s %6d %16.1f %14.0f %8.1f' % (config, depth, result['first_step_s'], result['peak_rss_mib'],
                                                 result['exit_s']), flush=True)
    for config in configs:
      done = [(d, results[config, d]) for d in depths if 'failed' not in results[config, d]]
      if len(done) >= 2:
        (d0, r0), (d1, r1) = done[0], done[-1]
        print('%s: first step %.2fx from %d to %d layers; peak RSS %+.1f MiB a layer' % (
            config, r1['first_step_s'] / r0['first_step_s'], d0, d1,
            (r1['peak_rss_mib'] - r0['peak_rss_mib']) / (d1 - d0)))
  if args.write_docs:
    benchmark_page.Write('Time to first step over depth', printed.Text(), cpu_kernels.DescribeCpu(), commit=commit)


if __name__ == '__main__':
  main()
