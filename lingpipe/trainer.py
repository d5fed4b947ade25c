r"""lingpipe-train: train, evaluate, export or inspect a registered model.

    lingpipe-train --model=synthetic.Mlp --logdir=/tmp/mlp                 # train (resumes if interrupted)
    lingpipe-train --model=synthetic.Mlp --logdir=/tmp/mlp --mode=eval     # metrics JSON of the latest checkpoint
    lingpipe-train --model=mt.multilingual.TransformerGPipe --logdir=/tmp/mt --mode=decode  # hypotheses, BLEU
    lingpipe-train --model=synthetic.Mlp --logdir=/tmp/mlp --mode=export   # SavedModel with a serving signature
    lingpipe-train --model=synthetic.Mlp --logdir=/tmp/mlp --mode=inspect  # params and variables
    lingpipe-train --model=synthetic.DeepMlpGPipe --logdir=/tmp/d --mode=profile  # pipeline timeline, bubble
    lingpipe-train --mode=list                                              # registered models
    lingpipe-train --model=synthetic.Mlp --logdir=/tmp/mlp \
        --model_params_override="task.train.learning_rate=0.01;input.batch_size=128"

Errors in what the user gave (unknown model, bad override, unusable checkpoint, missing data) print one line and
exit with status 1; --verbose adds the traceback and TensorFlow's own log lines.
"""

import os
import sys

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from lingpipe import binary
from lingpipe import process_setup
from lingpipe.memory import memory_budget
from lingpipe.runners import run_params

MODES = ('train', 'eval', 'decode', 'export', 'inspect', 'profile', 'list')

flags.DEFINE_string('model', None, 'Registered model, e.g. synthetic.Mlp or image.cifar10.AmoebaNetD.')
flags.DEFINE_string('logdir', None, 'Directory of checkpoints, summaries, params.txt, eval results, exports.')
flags.DEFINE_enum('mode', 'train', MODES, 'What to do.')
flags.DEFINE_integer('max_steps', None, 'Overrides task.train.max_steps.')
flags.DEFINE_string('model_params_override', '', "Params text applied on top of the model's: 'a.b=v;c=w' or "
                    "'a.b : v' lines.")
flags.DEFINE_string('model_params_file_override', None, 'A file of params text applied before '
                    '--model_params_override.')
flags.DEFINE_integer('seed', None, 'Sets task.random_seed (weights, dropout) and input.seed (shuffling).')
flags.DEFINE_string('eval_dataset', 'Test', 'Dataset of --mode=eval and --mode=decode: Train, Dev or Test.')
flags.DEFINE_string('checkpoint_path', None, 'Checkpoint prefix for eval/export (default: the latest).')
flags.DEFINE_string('export_dir', None,
                    'Where --mode=export writes (default: <logdir>/export/<step>, a TF Serving version folder).')
flags.DEFINE_integer('pipeline_devices', None, 'Local devices for pipeline cells: GPUs if there are enough, '
                     'else this many logical CPU devices (intra_op=1 each). Default: cluster.num_replicas times the '
                     'most num_splits of any PipeliningLayer in the model.')
flags.DEFINE_string('cluster_spec', None, 'Run on lingpipe-worker processes: the cluster as JSON {"worker": '
                    '["host:port", ...]} or worker=host:port,host:port (the workers\' --cluster_spec). Train, eval, '
                    'decode and inspect use the workers; export always builds a local single-device graph. Default: '
                    'TF_CONFIG\'s cluster, where it is set (its chief is this trainer).')
flags.DEFINE_string('job', None, 'The job of --cluster_spec whose tasks hold the pipelines (sets cluster.job; '
                    'default worker).')
flags.DEFINE_integer('task', None, 'If set, this trainer is itself task --task of --job and serves its devices; '
                     'by default it is a client outside the cluster spec.')
flags.DEFINE_integer('profile_steps', 5, '--mode=profile: training steps to record (after 2 warm-up steps).')
flags.DEFINE_float('termination_grace_s', 20.0, 'On SIGTERM, training finishes its step, saves a checkpoint and '
                   'exits with 143; if that takes longer than this, it exits without a new checkpoint (keep it under '
                   'the scheduler\'s grace period: 30 s in Kubernetes).')
flags.declare_key_flag(memory_budget.FLAG.name)  # Defined once for both binaries (memory_budget.py).
flags.DEFINE_string('device_memory', None, '--mode=inspect and --pipeline=auto: the memory of one device (on CPU '
                    'machines, of the process holding it), e.g. 1.5GiB; the planner says whether the model fits it. '
                    "Default: the budgets the workers report, or this process's budget, else none (nothing is said "
                    'to fit).')
flags.DEFINE_enum('pipeline', None, ['auto'], "auto: the trainer chooses each pipeline's K, M, remat, schedule and "
                  'balance (those --model_params_override does not set) from the devices, the memory budget and '
                  'layer times measured here, says what it chose, and records it in params.txt (a resume reuses '
                  "it). Setting a field to 'auto' in the Params chooses that field alone.")
flags.DEFINE_boolean('verbose', False, 'Show tracebacks of user errors and TensorFlow\'s own log lines.')

FLAGS = flags.FLAGS
_PATH_FLAGS = ('logdir', 'model_params_file_override', 'checkpoint_path', 'export_dir')


def Run(argv=None, out=None):
  """Runs the mode given by FLAGS; returns what the mode returns."""
  del argv
  from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
  from lingpipe.model import model_registry  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  from lingpipe.logdir import checkpointer  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import decoder  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import evaler  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import exporter  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import inspector  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import interrupt  # pylint: disable=g-import-not-at-top
  from lingpipe.logdir import logdir_lock  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import profiler  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import train_loop  # pylint: disable=g-import-not-at-top

  for name in _PATH_FLAGS:  # `--logdir=~/run`: the shell expands no ~ after '=', so the path would start '~'.
    if FLAGS[name].value:
      FLAGS[name].value = os.path.expanduser(FLAGS[name].value)
  if FLAGS.memory_limit:  # Applied before TensorFlow loaded (binary.py); a bad value is one line here.
    from lingpipe.core import byte_sizes  # pylint: disable=g-import-not-at-top
    byte_sizes.ParseBudget(FLAGS.memory_limit, '--memory_limit')  # The trainer process's, in this machine.
  if FLAGS.mode == 'list':
    for key in sorted(model_registry.GetAllRegisteredModels()):
      print(key, file=out)
    return None
  if not FLAGS.model:
    raise errors.ConfigError('--model is required (e.g. --model=synthetic.Mlp; --mode=list shows them all).')
  if FLAGS.mode != 'inspect' and not FLAGS.logdir:
    raise errors.ConfigError('--logdir is required for --mode=%s (e.g. --logdir=/tmp/run).' % FLAGS.mode)
  dataset = FLAGS.eval_dataset if FLAGS.mode in ('eval', 'decode') else 'Train'
  if FLAGS.mode != 'inspect':
    checkpointer.CheckLogdirModel(FLAGS.logdir, FLAGS.model)  # Before the lock: a refused logdir stays untouched.
  params_args = (FLAGS.model, dataset, FLAGS.model_params_file_override, FLAGS.model_params_override,
                 FLAGS.max_steps, FLAGS.seed)
  if FLAGS.mode in ('eval', 'decode', 'export', 'profile'):  # The run's task params, as it was trained.
    p, note = run_params.BuildRunParams(FLAGS.logdir, *params_args)
    if note:
      print(note, file=out, flush=True)
  else:
    p = run_params.BuildModelParams(*params_args, auto_pipeline=FLAGS.pipeline == 'auto')
  if FLAGS.job:
    p.cluster.job = FLAGS.job
  spec = ClusterSpec(p)
  ChoosePipeline(p, spec, out)
  if FLAGS.mode == 'train':
    if FLAGS.termination_grace_s <= 0:
      raise errors.ConfigError('--termination_grace_s=%g: expected a number of seconds > 0.' %
                               FLAGS.termination_grace_s)
    mesh = SetUpCluster(p, spec, out)  # Before the lock: a refused cluster leaves the logdir untouched.
    with logdir_lock.LogdirLock(FLAGS.logdir, out=out):  # One writer per logdir (logdir_lock.py).
      checkpointer.CheckLogdirModel(FLAGS.logdir, FLAGS.model)  # Again, now that no one else writes there.
      with cluster.Use(mesh):
        loop = train_loop.TrainLoop(p, FLAGS.logdir, out=out, termination_grace_s=FLAGS.termination_grace_s)
        try:
          return loop.Run()
        except KeyboardInterrupt as e:
          raise interrupt.Interrupted(loop.ResumeHint()) from e
  with cluster.Use(SetUpCluster(p, spec, out)):
    if FLAGS.mode == 'inspect':
      from lingpipe.core import byte_sizes  # pylint: disable=g-import-not-at-top
      return inspector.Inspect(p, out=out, device_memory=byte_sizes.Parse(FLAGS.device_memory, '--device_memory')
                               if FLAGS.device_memory else None)
    if FLAGS.mode == 'eval':
      return evaler.Evaluate(p, FLAGS.logdir, FLAGS.checkpoint_path, out=out)
    if FLAGS.mode == 'decode':
      return decoder.Decode(p, FLAGS.logdir, FLAGS.checkpoint_path, out=out)
    if FLAGS.mode == 'profile':
      return profiler.Profile(p, FLAGS.logdir, FLAGS.profile_steps, out=out)
    return exporter.Export(p, FLAGS.logdir, FLAGS.export_dir, FLAGS.checkpoint_path, out=out)


def ClusterSpec(p):
  """(cluster spec, own task) of --cluster_spec and --task or TF_CONFIG (tf_config.py), or (None, None) for local
  devices; export builds a local single-device graph."""
  if FLAGS.mode == 'export':
    return None, None
  from lingpipe.distributed import tf_config  # pylint: disable=g-import-not-at-top
  return tf_config.ForTrainer(FLAGS.cluster_spec, FLAGS.task, p.cluster.job, mode=FLAGS.mode)


def ChoosePipeline(p, spec, out=None):
  """Chooses the pipeline fields of `p` left 'auto' among the local devices, or reuses the run's recorded choice
  (runners/pipeline_choice.py); on a cluster (`spec`, ClusterSpec's) a new choice is made among the workers once
  connected (SetUpCluster)."""
  from lingpipe.runners import pipeline_choice  # pylint: disable=g-import-not-at-top
  if not pipeline_choice.Pending(p):
    return None
  return pipeline_choice.AmongLocalDevices(p, spec[0], _RecordedParams(), FLAGS.pipeline_devices,
                                           FLAGS.device_memory, out)


def _RecordedParams():
  """The params.txt of --logdir's run (its recorded pipeline choice), or None (inspect writes no run)."""
  if not FLAGS.logdir or FLAGS.mode == 'inspect':
    return None
  from lingpipe.logdir import checkpointer  # pylint: disable=g-import-not-at-top
  return checkpointer.RecordedParamsText(FLAGS.logdir)


def SetUpCluster(p, spec, out=None):
  """The device mesh of model params `p`: the workers of `spec` (ClusterSpec's), else local devices (made first,
  before anything runs a TensorFlow op). Pipeline fields left 'auto' on a cluster are chosen here, among the
  workers."""
  from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
  from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top
  spec, own_task = spec
  if spec is not None:
    from lingpipe.runners import pipeline_choice  # pylint: disable=g-import-not-at-top
    recorded = _RecordedParams() if pipeline_choice.Pending(p) else None
    return pipeline_choice.AmongWorkers(p, spec, own_task, recorded, FLAGS.device_memory, out)
  num_splits = cluster.MaxNumSplits(p)
  if FLAGS.task is not None and not FLAGS.cluster_spec:
    raise errors.ConfigError('--task=%d needs --cluster_spec.' % FLAGS.task)
  needed = p.cluster.num_replicas * max(1, num_splits)
  num_devices = FLAGS.pipeline_devices if FLAGS.pipeline_devices is not None else needed
  if num_devices > 1:
    cluster.ConfigureLocalDevices(num_devices)
  return cluster.Cluster.FromParams(p.cluster, num_splits)


def main(argv):
  status = binary.CheckNoArguments('lingpipe-train', argv)
  if status is not None:
    return status
  binary.QuietUnlessVerbose(FLAGS.verbose)
  process_setup.SetUpProcess()  # Before TensorFlow starts: balance='memory' needs the allocator's statistics.
  return binary.RunUserErrorsAsOneLine('lingpipe-train', Run, FLAGS.verbose)


def Main():
  """Console-script entry point."""
  binary.StartProcess(__doc__, __name__)

  def Run(argv):
    status = main(argv)
    if 'lingpipe.distributed.worker_lease' in sys.modules:  # It held workers: they may restart now.
      sys.modules['lingpipe.distributed.worker_lease'].ReleaseAll()
    binary.Exit(status)

  app.run(Run)


if __name__ == '__main__':
  Main()
