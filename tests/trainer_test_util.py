"""Running lingpipe-train's main in-process, as the trainer tests do."""

from absl import flags

from lingpipe import trainer

FLAGS = flags.FLAGS
FAST = 'task.train.save_interval_steps=5;task.train.log_interval_steps=5;task.train.summary_interval_steps=5'


def RunTrainer(capsys, *args):
  """Runs lingpipe-train's main with `args`; returns (exit code, stdout, stderr)."""
  FLAGS.unparse_flags()
  FLAGS(['lingpipe-train'] + list(args))
  code = trainer.main(['lingpipe-train'])
  out, err = capsys.readouterr()
  return code, out, err


def Error(capsys, *args):
  """The one-line error of a run that must fail with exit status 1 (without its 'lingpipe-train: error: ')."""
  code, _, err = RunTrainer(capsys, *args)
  assert code == 1, err
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  assert lines[0].startswith('lingpipe-train: error: ')
  return lines[0][len('lingpipe-train: error: '):]
