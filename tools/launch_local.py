r"""Runs lingpipe-train against N lingpipe-worker processes on this machine, in one command.

    python tools/launch_local.py --workers=2 -- --model=synthetic.DeepMlpGPipe --logdir=/tmp/mp --max_steps=100
    python tools/launch_local.py --workers=4 --pin -- --model=synthetic.DeepMlpGPipe --logdir=/tmp/mp2 \
        --model_params_override="cluster.num_replicas=2"

Starts the workers on free loopback ports (each with --cpu_devices devices; --pin puts worker i on core
i mod #cores), waits until each is ready, runs the trainer with --cluster_spec set to them and the flags after
`--`, then stops the workers (SIGTERM). Exits with the trainer's status. Worker logs go to --log_dir (default: a
temporary directory, printed, and removed at the end unless a worker exited with an error).

Nothing outlives the launcher: SIGTERM, SIGINT or SIGHUP to it stops the trainer (SIGTERM: it saves a checkpoint)
and then the workers, and it exits with 128 + the signal. If it is killed outright (SIGKILL), Linux sends its
children a parent-death signal (local_cluster.ChildSetup): SIGTERM to the trainer, which saves, and SIGUSR1 to the
workers, which serve until the trainer has saved and gone, then stop. The children share its process group, so
`kill -- -PGID` reaches all of them too.
"""

import argparse
import os
import signal
import subprocess
import sys


from lingpipe import binary
from lingpipe import native_log

binary.QuietTool()  # Before TensorFlow loads (local_cluster imports it): its start-up notices stay off the terminal.

from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
from lingpipe.distributed import local_cluster  # pylint: disable=g-import-not-at-top


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workers', type=int, default=2, help='Number of worker processes.')
  parser.add_argument('--cpu_devices', type=int, default=1, help='CPU devices per worker (when it has no GPU).')
  parser.add_argument('--pin', action='store_true', help='Pin worker i to core i mod the number of cores.')
  parser.add_argument('--threads', type=int, default=0, help='Intra- and inter-op threads per worker (0: default).')
  parser.add_argument('--log_dir', default=None, help='Where worker logs go.')
  parser.add_argument('--worker_memory', default=None, help='Each worker\'s memory budget (lingpipe-worker '
                      '--memory_limit), e.g. 1.5GiB: the kernel enforces it, and the trainer names a worker that dies '
                      'of it.')
  parser.add_argument('--tf_config', action='store_true', help='Give the workers and the trainer (the chief) their '
                      'cluster and task in TF_CONFIG, as Kubernetes operators do, instead of --cluster_spec.')
  parser.add_argument('trainer_flags', nargs='*', help='Flags for lingpipe-train (after --).')
  args = parser.parse_args(argv)
  cores = sorted(os.sched_getaffinity(0))
  pins = [{cores[i % len(cores)]} for i in range(args.workers)] if args.pin else None
  try:
    workers = local_cluster.LocalCluster(args.workers, cpu_devices=args.cpu_devices, pin_cores=pins,
                                         threads=args.threads, log_dir=args.log_dir, tf_config=args.tf_config,
                                         memory_limit=args.worker_memory)
    print('Workers: %s (logs in %s)' % (workers.spec_text, workers.log_dir), flush=True)
    with workers:
      command = [sys.executable, '-m', 'lingpipe.trainer']
      env = dict(os.environ)
      if args.tf_config:
        env['TF_CONFIG'] = workers.TfConfig('chief', 0)
      else:
        env.pop('TF_CONFIG', None)
        command.append('--cluster_spec=' + workers.spec_text)
      # Its stderr is the launcher's own, not the launcher's filter pipe: it outlives a killed launcher to say
      # where it saved.
      trainer = subprocess.Popen(command + args.trainer_flags, preexec_fn=local_cluster.ChildSetup(), env=env,
                                 stderr=native_log.TerminalFd())
      return WaitForTrainer(trainer)
  except errors.UserError as e:
    print('launch_local: error: %s' % e, file=sys.stderr)
    return 1
  except _Stopped as e:  # A signal while the workers started.
    return 128 + e.signum


class _Stopped(Exception):

  def __init__(self, signum):
    super().__init__(signum)
    self.signum = signum


def _RaiseStopped(signum, unused_frame):
  raise _Stopped(signum)


def WaitForTrainer(trainer, grace_s=30.0):
  """The trainer's exit status; a stop signal to the launcher is passed on to it (SIGTERM, then SIGKILL after
  grace_s) and gives 128 + the signal. The workers are stopped by the caller's `with`."""
  try:
    return trainer.wait()
  except _Stopped as e:
    print('launch_local: stopping the trainer and the workers (signal %d)' % e.signum, file=sys.stderr, flush=True)
    trainer.terminate()
    try:
      trainer.wait(grace_s)
    except subprocess.TimeoutExpired:
      trainer.kill()
      trainer.wait()
    return 128 + e.signum


if __name__ == '__main__':
  for stop_signal in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(stop_signal, _RaiseStopped)
  sys.exit(main())
