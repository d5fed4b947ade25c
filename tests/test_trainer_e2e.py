"""End to end through the installed binary: train, SIGKILL, resume, eval, export, serve without lingpipe."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from lingpipe.logdir import checkpointer

pytestmark = pytest.mark.slow

TRAINER = [sys.executable, '-m', 'lingpipe.trainer']


def _Run(*args, timeout=300):
  return subprocess.run(TRAINER + list(args), capture_output=True, text=True, timeout=timeout)


def _LatestStep(train_dir):
  index = os.path.join(train_dir, 'checkpoint')
  if not os.path.exists(index):
    return 0
  m = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', open(index).read(), re.M)
  return int(m.group(1)) if m else 0


def test_killed_run_resumes_then_evals_and_exports_a_servable_model(tmp_path):
  logdir = str(tmp_path / 'mlp')
  train_dir = os.path.join(logdir, 'train')
  override = 'task.train.save_interval_steps=50;task.train.log_interval_steps=500'
  proc = subprocess.Popen(TRAINER + ['--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=1000000',
                                     '--model_params_override=' + override],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  deadline = time.time() + 120
  while _LatestStep(train_dir) < 150 and time.time() < deadline and proc.poll() is None:
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert _LatestStep(train_dir) >= 150, proc.stdout.read()
  # The newest complete checkpoint: the index's latest, or a newer one whose save the kill cut off between its
  # files and the index (the rerun adopts it, checkpointer.Candidates).
  killed_at = checkpointer.Step(checkpointer.LatestCheckpoint(train_dir))

  resumed = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--max_steps=%d' % (killed_at + 100),
                 '--model_params_override=' + override)
  assert resumed.returncode == 0, resumed.stderr
  assert 'Resumed from %s/ckpt-%d at step %d.' % (train_dir, killed_at, killed_at) in resumed.stdout
  assert 'Training synthetic.Mlp from step %d to %d' % (killed_at, killed_at + 100) in resumed.stdout
  assert _LatestStep(train_dir) == killed_at + 100

  evaluated = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=eval')
  assert evaluated.returncode == 0, evaluated.stderr
  accuracy = float(re.search(r'accuracy=([0-9.]+)', evaluated.stdout).group(1))
  assert accuracy > 0.8, evaluated.stdout

  exported = _Run('--model=synthetic.Mlp', '--logdir=' + logdir, '--mode=export')
  assert exported.returncode == 0, exported.stderr
  export_dir = os.path.join(logdir, 'export', '%d' % (killed_at + 100))
  assert export_dir in exported.stdout

  # Serve in a fresh interpreter that never imports lingpipe.
  serve = subprocess.run([sys.executable, '-c', '''
import sys
import numpy as np
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
out = model.signatures["serving_default"](features=tf.constant(np.ones([5, 16], np.float32)))
assert "lingpipe" not in sys.modules
print("probs", out["probs"].shape, "sum", float(tf.reduce_sum(out["probs"])), "ids", out["class_ids"].numpy())
''', export_dir], capture_output=True, text=True, timeout=120)
  assert serve.returncode == 0, serve.stderr
  assert 'probs (5, 4) sum 5.0' in serve.stdout


def test_user_error_is_one_line_and_nonzero_exit():
  result = _Run('--model=synthetic.Mpl', '--logdir=/tmp/unused')
  assert result.returncode == 1
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(
      "lingpipe-train: error: Unknown model 'synthetic.Mpl'. Did you mean: synthetic.Mlp"), result.stderr


@pytest.mark.parametrize('model', ['synthetic.DeepMlpGPipe', 'synthetic.TransformerStackGPipe'])
def test_gpipe_models_train_eval_export_and_serve_on_one_device(model, tmp_path):
  logdir = str(tmp_path / 'run')
  trained = _Run('--model=' + model, '--logdir=' + logdir, '--max_steps=20',
                 '--model_params_override=task.train.log_interval_steps=10;task.train.save_interval_steps=10')
  assert trained.returncode == 0, trained.stderr
  assert 'step 20/20' in trained.stdout
  evaluated = _Run('--model=' + model, '--logdir=' + logdir, '--mode=eval')
  assert evaluated.returncode == 0 and 'accuracy=' in evaluated.stdout, evaluated.stderr
  exported = _Run('--model=' + model, '--logdir=' + logdir, '--mode=export')
  assert exported.returncode == 0, exported.stderr
  export_dir = os.path.join(logdir, 'export', '20')
  inspected = _Run('--model=' + model, '--mode=inspect')
  assert '# Pipeline' in inspected.stdout and 'CPU:1' in inspected.stdout
  # A fresh interpreter with one CPU device and no lingpipe serves the export: it needs no pipeline.
  serve = subprocess.run([sys.executable, '-c', '''
import sys
import tensorflow as tf
assert len(tf.config.list_logical_devices("CPU")) == 1
fn = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
specs = fn.structured_input_signature[1]
feeds = {name: tf.ones([3] + [d or 5 for d in spec.shape[1:]], spec.dtype) for name, spec in specs.items()}
if "paddings" in feeds:
  feeds["paddings"] = tf.zeros_like(feeds["paddings"])
out = fn(**feeds)
assert "lingpipe" not in sys.modules
print("served", sorted(out))
if "paddings" in feeds:
  try:
    fn(ids=feeds["ids"], paddings=feeds["paddings"][:, :2])
  except tf.errors.InvalidArgumentError as e:
    print("refused", str(e).split("assertion failed: ")[1].splitlines()[0])
''', export_dir], capture_output=True, text=True, timeout=120)
  assert serve.returncode == 0, serve.stderr
  assert 'served' in serve.stdout
  if model == 'synthetic.TransformerStackGPipe':
    assert 'refused [Inputs `ids` and `paddings` must have the same shape [batch, time]; got] [3 5] [3 2]' in \
        serve.stdout


def test_image_task_trains_on_the_sample_evals_exports_and_classifies(tmp_path):
  logdir = str(tmp_path / 'amoebanet')
  trained = _Run('--model=image.cifar10.AmoebaNetD', '--logdir=' + logdir, '--max_steps=4',
                 '--model_params_override=task.train.log_interval_steps=2;input.batch_size=16')
  assert trained.returncode == 0, trained.stderr
  assert 'step 4/4' in trained.stdout and 'top5_accuracy=' in trained.stdout
  evaluated = _Run('--model=image.cifar10.AmoebaNetD', '--logdir=' + logdir, '--mode=eval')
  assert evaluated.returncode == 0 and 'num_examples=100.0000' in evaluated.stdout, evaluated.stderr
  exported = _Run('--model=image.cifar10.AmoebaNetD', '--logdir=' + logdir, '--mode=export')
  assert exported.returncode == 0, exported.stderr
  serve = subprocess.run([sys.executable, '-c', '''
import sys
import numpy as np
import tensorflow as tf
with np.load(sys.argv[2]) as data:
  images, labels = data["x"][:8], data["y"][:8]
out = tf.saved_model.load(sys.argv[1]).signatures["serving_default"](images=tf.constant(images))
assert "lingpipe" not in sys.modules
probs = out["probs"].numpy()
assert probs.shape == (8, 10) and np.allclose(probs.sum(-1), 1.0, atol=1e-4)
print("classified", out["class_ids"].numpy().tolist())
''', os.path.join(logdir, 'export', '4'),
      os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tasks', 'image', 'data',
                   'cifar10_sample', 'test.npz')], capture_output=True, text=True, timeout=120)
  assert serve.returncode == 0, serve.stderr
  assert 'classified' in serve.stdout
