"""Dynamic loss scaling for float16: the scale's rule, skipped steps counted, the scale kept in checkpoints, and
a run that skips too many steps in a row stopped with the last good checkpoint named."""

import os

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import loss_scale
import trainer_test_util as util

F16 = "task.fprop_dtype='float16';task.train.log_interval_steps=5;task.train.save_interval_steps=5"


def test_the_scale_doubles_after_growth_steps_and_halves_on_a_skipped_step():
  p = loss_scale.Params().Set(initial_scale=8.0, growth_steps=3)
  s = loss_scale.DynamicLossScale(p)
  for finite in (True, True, True):
    s.Update(tf.constant(finite))
  assert float(s.scale) == 16.0 and int(s.finite_in_a_row) == 0
  s.Update(tf.constant(True))
  s.Update(tf.constant(False))
  s.Update(tf.constant(False))
  assert float(s.scale) == 4.0 and (int(s.skipped), int(s.skipped_in_a_row), int(s.finite_in_a_row)) == (2, 2, 0)
  s.Update(tf.constant(True))
  assert int(s.skipped_in_a_row) == 0 and int(s.skipped) == 2
  np.testing.assert_allclose(s.Unscale([tf.constant([8.0, 4.0]), None], tf.constant(4.0))[0], [2.0, 1.0])
  with pytest.raises(errors.ConfigError, match="mode: 'dynamc' is not allowed; expected one of 'auto', 'dynamic'"):
    p.mode = 'dynamc'


def test_auto_scales_float16_only():
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  wanted = {}
  for dtype in ('float32', 'bfloat16', 'float16'):
    p = run_params.BuildModelParams('synthetic.Mlp', override="task.fprop_dtype='%s'" % dtype)
    wanted[dtype] = p.task.Instantiate().CreateLossScale() is not None
  assert wanted == {'float32': False, 'bfloat16': False, 'float16': True}


@pytest.mark.slow
def test_float16_skips_and_counts_overflowing_steps_keeps_the_scale_and_stops_when_it_cannot_recover(
    capsys, tmp_path):
  logdir = str(tmp_path / 'f16')
  # 1e9: the float16 gradients overflow until the scale has halved enough; those steps are skipped, not applied.
  code, out, _ = util.RunTrainer(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + logdir, '--max_steps=10',
                                 '--model_params_override=' + F16 + ';task.train.loss_scaling.initial_scale=1e9')
  assert code == 0, out
  skipped = [line for line in out.splitlines() if ' skipped: non-finite gradients at loss scale ' in line]
  assert 3 <= len(skipped) < 20, out
  assert 'step 10/10 loss=' in out and 'skipped=%d' % len(skipped) in out
  reader = tf.train.load_checkpoint(os.path.join(logdir, 'train', 'ckpt-10'))
  saved_scale = reader.get_tensor('loss_scale/scale/.ATTRIBUTES/VARIABLE_VALUE')
  assert 1.0 <= saved_scale < 1e9 and reader.get_tensor('loss_scale/skipped/.ATTRIBUTES/VARIABLE_VALUE') == len(
      skipped)
  # Resumed, the run goes on with the scale it had, not the initial one, and counts on.
  code, out, _ = util.RunTrainer(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + logdir, '--max_steps=15',
                                 '--model_params_override=' + F16 + ';task.train.loss_scaling.initial_scale=1e9')
  assert code == 0 and 'Resumed from' in out, out
  final = [line for line in out.splitlines() if line.startswith('step 15/15 ')][0]
  assert float(final.split('loss_scale=')[1].split()[0]) <= saved_scale * 2, final
  assert int(final.split('skipped=')[1].split()[0]) >= len(skipped), final
  # Gradients that are not finite at any scale (a learning rate that blows the weights up): stopped after
  # max_skipped_in_a_row, naming the last good checkpoint.
  line = util.Error(capsys, '--model=synthetic.DeepMlpGPipe', '--logdir=' + logdir, '--max_steps=40',
                    '--model_params_override=' + F16 + ';task.train.learning_rate=1e30;'
                    'task.train.loss_scaling.max_skipped_in_a_row=3')
  assert '3 steps in a row had non-finite gradients' in line and 'The last good checkpoint is %s/train/ckpt-' % (
      logdir) in line, line


def test_a_bfloat16_run_has_no_loss_scale_and_the_nan_guard_stops_it(capsys, tmp_path):
  line = util.Error(capsys, '--model=synthetic.Mlp', '--logdir=%s' % (tmp_path / 'bf16'), '--max_steps=20',
                    "--model_params_override=task.fprop_dtype='bfloat16';task.train.learning_rate=1e30")
  assert 'is not finite; stopped without applying it' in line and 'skipped' not in line, line
