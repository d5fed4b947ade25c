"""Mistakes in params and paths, and what params.txt records, as a user meets them through lingpipe-train's main
(in-process, as tests/test_trainer.py runs it): each mistake is one line naming the value and what is allowed, and
nothing is written before it is caught."""

import errno
import os

import pytest
import tensorflow as tf

from lingpipe.logdir import checkpointer
import trainer_test_util as util

MLP = '--model=synthetic.Mlp'
EVERY_2 = 'task.train.save_interval_steps=2;task.train.log_interval_steps=2;task.train.summary_interval_steps=2'


def _Train(capsys, logdir, max_steps, override=''):
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=%d' % max_steps,
                                   '--model_params_override=' + ';'.join(x for x in (EVERY_2, override) if x))
  assert code == 0, err
  return out


@pytest.mark.parametrize('override, expected', [
    ('input.batch_size=None', 'Param input.batch_size: None is not allowed; expected an int >= 1.'),
    ('task.train.learning_rate=None',
     'Param task.train.learning_rate: None is not allowed; expected a finite number > 0.'),
    ('task.train.learning_rate=-1',
     'Param task.train.learning_rate: -1.0 is not allowed; expected a finite number > 0.'),
    ('task.train.learning_rate=1e400',
     'Param task.train.learning_rate: inf is not allowed; expected a finite number > 0.'),
    ('task.random_seed=abc', "Param task.random_seed: 'abc' is not allowed; expected None or an int."),
    ('task.dtype=tf.string', 'Param task.dtype: tf.string is not allowed; expected a floating-point dtype'),
    ('task.train.log_interval_steps=0', 'Param task.train.log_interval_steps: 0 is not allowed; expected an int >= 1.'),
    ('task.train.summary_interval_steps=0', 'Param task.train.summary_interval_steps: 0 is not allowed'),
    ("task.train.init_from_checkpoint_rules=[['(', 'x']]", 'Param task.train.init_from_checkpoint_rules: '
     "[['(', 'x']] is not allowed; expected a list of [regex, replacement] pairs"),
    ("task.train.init_from_checkpoint_rules=['network']", 'Param task.train.init_from_checkpoint_rules'),
    ("task.train.init_from_checkpoint_exclude=['[']", 'Param task.train.init_from_checkpoint_exclude'),
    ('task.train.optimizer.beta1=1.5', 'Param task.train.optimizer.beta1: 1.5 is not allowed; expected a number in '
     '[0, 1).'),
    ("model='synthetic.DeepMlpGPipe'", "--model_params_override sets model to 'synthetic.DeepMlpGPipe', but model is "
     'set by --model'),
    ('dataset=Test', "--model_params_override sets dataset to 'Test', but dataset is set by --eval_dataset"),
    ("input.name='bob;input.batch_size=8", "Params text: the string opened by ' in \"input.name='bob"),
    # A missing comma: Python would join the strings into one.
    ("task.train.init_from_checkpoint_exclude=['a' 'b']", "Param task.train.init_from_checkpoint_exclude: value "
     "['a' 'b']: the strings 'a' 'b' stand side by side, which Python would join into one ('ab'); put a comma between "
     'list items, or write one string.'),
    ("task.train.init_from_checkpoint_rules=[['x', 'y' \"z\"]]", "Param task.train.init_from_checkpoint_rules: "
     "value [['x', 'y' \"z\"]]: the strings 'y' \"z\" stand side by side"),
    ("input.name='a' 'b'", "Param input.name: value 'a' 'b': the strings 'a' 'b' stand side by side"),
])
def test_a_bad_override_is_one_line_before_anything_is_written(capsys, tmp_path, override, expected):
  logdir = str(tmp_path / 'run')
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--max_steps=2', '--model_params_override=' + override)
  assert line.startswith(expected), line
  assert not os.path.exists(logdir)


@pytest.mark.slow
def test_an_apostrophe_inside_a_value_is_a_letter_and_the_statements_after_it_apply(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 2, "input.name=bob's;input.batch_size=8;task.train.learning_rate=0.5")
  params = open(os.path.join(logdir, 'params.txt')).read()
  for line in ('input.name : "bob\'s"', 'input.batch_size : 8', 'task.train.learning_rate : 0.5'):
    assert line + '\n' in params, params
  # The unclosed-quote message's advice, as written: quote the whole value.
  _Train(capsys, logdir, 3, 'input.name="it\'s";input.batch_size=8;task.train.learning_rate=0.5')
  assert 'input.name : "it\'s"\n' in open(os.path.join(logdir, 'params.txt')).read()


@pytest.mark.parametrize('content, cause', [(b'\x89PNG\r\n\x1a\n\x00\xff', 'is not params text (not UTF-8 at byte 0)'),
                                            (None, 'cannot read')])
def test_a_params_file_that_is_binary_or_a_folder_is_one_line(capsys, tmp_path, content, cause):
  path = tmp_path / 'override'
  if content is None:
    path.mkdir()
  else:
    path.write_bytes(content)
  line = util.Error(capsys, MLP, '--logdir=%s' % (tmp_path / 'run'), '--model_params_file_override=%s' % path)
  assert line.startswith('--model_params_file_override: ') and str(path) in line and cause in line, line


def test_a_logdir_that_is_a_file_or_a_symlink_loop_is_one_line_and_untouched(capsys, tmp_path):
  a_file = tmp_path / 'file'
  a_file.write_text('mine')
  for mode in ('train', 'eval', 'export'):
    line = util.Error(capsys, MLP, '--logdir=%s' % a_file, '--mode=' + mode)
    assert line == '--logdir %s is a file, not a folder; nothing was changed. Give a folder path.' % a_file, line
  assert a_file.read_text() == 'mine'
  loop = tmp_path / 'loop'
  os.symlink(loop, loop)
  line = util.Error(capsys, MLP, '--logdir=%s' % loop)
  assert line.startswith('Cannot use --logdir %s: Too many levels of symbolic links; nothing was changed.' % loop), line
  too_long = str(tmp_path / ('x' * 300))
  line = util.Error(capsys, MLP, '--logdir=' + too_long, '--max_steps=1')
  assert line.startswith('Cannot use --logdir %s: File name too long; nothing was changed.' % too_long), line
  dangling = tmp_path / 'dangling'
  os.symlink(tmp_path / 'gone', dangling)
  line = util.Error(capsys, MLP, '--logdir=%s' % dangling, '--max_steps=1')
  assert line.startswith('--logdir %s is a broken or looping symlink, not a folder' % dangling), line


def test_a_damaged_params_txt_in_the_logdir_is_one_line(capsys, tmp_path):
  logdir = tmp_path / 'run'
  logdir.mkdir()
  (logdir / 'params.txt').write_bytes(b'\xff\xfe binary')
  line = util.Error(capsys, MLP, '--logdir=%s' % logdir, '--max_steps=1')
  assert line.startswith('Cannot read params %s: not UTF-8 text.' % (logdir / 'params.txt')), line


def test_params_txt_changes_only_with_a_complete_checkpoint_of_the_new_params(capsys, tmp_path, monkeypatch):
  """A resumed run with other params whose first save fails, resumed again with yet other params: the params of
  the original checkpoints are still recorded, and nothing is overwritten."""
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 4)
  original = open(os.path.join(logdir, 'params.txt')).read()
  real_save = tf.train.CheckpointManager.save

  def FullDisk(*unused_args, **unused_kwargs):
    raise OSError(errno.ENOSPC, 'No space left on device')

  monkeypatch.setattr(tf.train.CheckpointManager, 'save', FullDisk)
  line = util.Error(capsys, MLP, '--logdir=' + logdir, '--max_steps=6',
                    '--model_params_override=%s;task.train.learning_rate=0.5' % EVERY_2)
  assert line.startswith('No space left on device writing checkpoint'), line
  assert open(os.path.join(logdir, 'params.txt')).read() == original
  monkeypatch.setattr(tf.train.CheckpointManager, 'save', real_save)
  out = _Train(capsys, logdir, 6, 'task.train.learning_rate=0.25')
  assert 'Params changed since step 4 (task.train.learning_rate, task.train.max_steps); the earlier ones are in ' \
         '%s/params.step_4.txt.' % logdir in out
  assert open(os.path.join(logdir, 'params.step_4.txt')).read() == original
  assert 'task.train.learning_rate : 0.25\n' in open(os.path.join(logdir, 'params.txt')).read()
  assert not os.path.exists(os.path.join(logdir, checkpointer.PENDING_PARAMS_FILE))


@pytest.mark.slow
def test_params_of_a_run_stopped_between_its_save_and_params_txt_are_recorded_by_the_next(capsys, tmp_path,
                                                                                          monkeypatch):
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 4)

  def Killed(unused_logdir):
    raise KeyboardInterrupt  # As if the process died right after its checkpoint was complete.

  monkeypatch.setattr(checkpointer, 'CommitParams', Killed)
  code, _, _ = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--max_steps=6',
                               '--model_params_override=%s;task.train.learning_rate=0.5' % EVERY_2)
  assert code == 130
  assert checkpointer.RecordedModel(logdir) == 'synthetic.Mlp'
  assert 'learning_rate : 0.5\n' in checkpointer.RecordedParamsText(logdir)  # What eval and init read.
  monkeypatch.undo()
  out = _Train(capsys, logdir, 8, 'task.train.learning_rate=0.5;task.train.max_steps=6')
  assert 'Recorded in %s/params.txt the params of ckpt-6' % logdir in out, out
  assert 'Resumed from %s/train/ckpt-6 at step 6.' % logdir in out
  assert 'learning_rate : 0.5\n' in open(os.path.join(logdir, 'params.txt')).read()


def test_resuming_with_another_batch_size_restarts_the_input_and_says_so(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 2)
  out = _Train(capsys, logdir, 4, 'input.batch_size=16;input.shuffle_buffer_size=100')
  assert 'Resumed from %s/train/ckpt-2 at step 2.' % logdir in out
  assert ("The input starts from its beginning, not from the checkpoint's position: the input params changed "
          '(input.batch_size 64 -> 16, input.shuffle_buffer_size 10000 -> 100).') in out, out
  out = _Train(capsys, logdir, 6, 'input.batch_size=16;input.shuffle_buffer_size=100')
  assert 'The input starts' not in out  # Its position is saved again.
  out = _Train(capsys, logdir, 8, 'input.batch_size=16;input.shuffle_buffer_size=100;input.checkpoint_iterator=False')
  assert 'input.checkpoint_iterator is False.' in out
  out = _Train(capsys, logdir, 10, 'input.batch_size=16;input.shuffle_buffer_size=100')
  assert 'the checkpoints were saved with input.checkpoint_iterator=False.' in out


def test_eval_and_export_of_a_run_use_its_recorded_task_params_and_say_so(capsys, tmp_path):
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 2, "task.fprop_dtype='bfloat16'")
  note = ("Using the run's params from %s where they differ from the registered model's: task.fprop_dtype : "
          'tf.bfloat16. Override them to change this.' % os.path.join(logdir, 'params.txt'))
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=eval')
  assert code == 0 and note in out, err
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export')
  assert code == 0 and note in out, err
  assert 'task.fprop_dtype : tf.bfloat16\n' in open(os.path.join(logdir, 'export', '2', 'params.txt')).read()
  # The command's own override wins, and nothing is said of what it set.
  code, out, err = util.RunTrainer(capsys, MLP, '--logdir=' + logdir, '--mode=export', '--export_dir=%s' % (
      tmp_path / 'f32'), "--model_params_override=task.fprop_dtype=None")
  assert code == 0 and "Using the run's params" not in out, err
  assert 'task.fprop_dtype : None\n' in open(str(tmp_path / 'f32' / 'params.txt')).read()


@pytest.mark.slow  # Trains, then evaluates, trains and exports on the edited file: 5-17 s a case.
@pytest.mark.parametrize('edit,shown,problem', [
    (lambda line: line.replace("'mlp'", "'mlp") if line.startswith('task.name ') else line, "task.name : 'mlp",
     'its value does not parse'),
    (lambda line: 'task.softmax.num_classes = [64' if line.startswith('task.softmax.num_classes ') else line,
     'task.softmax.num_classes = [64', "expected 'path : value'"),
    (lambda line: line + '\ngarbage line without colon' if line.startswith('task.name ') else line,
     'garbage line without colon', "expected 'path : value'"),
    # A stray quote after a number: read as the string "0.003'", which eval left out without a word.
    (lambda line: line + "'" if line.startswith('task.train.learning_rate ') else line,
     "task.train.learning_rate : 0.003'", 'its value is not a Python literal')])
def test_a_hand_edited_params_txt_that_does_not_parse_is_named_with_its_line(capsys, tmp_path, edit, shown, problem):
  """It was read as it was: eval called a param missing, a resume listed the garbage as a changed param."""
  logdir = str(tmp_path / 'run')
  _Train(capsys, logdir, 2)
  path = os.path.join(logdir, 'params.txt')
  lines = [edit(line) for line in open(path).read().splitlines()]
  with open(path, 'w') as f:
    f.write('\n'.join(lines) + '\n')
  number = '\n'.join(lines).splitlines().index(shown) + 1
  for mode in ('eval', 'train', 'export'):
    line = util.Error(capsys, MLP, '--logdir=' + logdir, '--mode=' + mode, '--max_steps=4')
    assert line.startswith('%s line %d does not parse: %r: %s' % (path, number, shown, problem)), line
