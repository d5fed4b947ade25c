r"""Trains a registered model twice in one process, plain and pipelined, from the same seed, and compares them.

    python benchmarks/pipeline_training/compare_pipeline_training.py --model=image.cifar10.AmoebaNetD \
        --steps=100 --splits=2 --micro=8

Both runs build the task from the same params (so the same initial weights: a pipeline's layers are named like
SequentialLayer's) and read the same batches. The plain run is the pipeline with one cell, one micro-batch and no
re-materialization, which runs the layers directly. With --frozen_bn (the default) every batch norm normalizes
with its moving statistics, so the two runs compute the same function and their loss curves must agree to float
tolerance; without it, the pipelined run normalizes each micro-batch by its own moments (GPipe's semantics) and
the curves agree only statistically. Prints both curves, the largest relative difference and images/s of each.
"""

import argparse
import time


from lingpipe import process_setup  # pylint: disable=g-import-not-at-top,wrong-import-position

process_setup.SetUpProcess()  # Before TensorFlow loads, as the binaries do.

from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top,wrong-import-position


def _Args():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--model', default='image.cifar10.AmoebaNetD')
  parser.add_argument('--steps', type=int, default=100)
  parser.add_argument('--splits', type=int, default=2)
  parser.add_argument('--micro', type=int, default=8)
  parser.add_argument('--remat', default='always', help='remat policy of the pipelined run.')
  parser.add_argument('--lr', type=float, default=None, help='Overrides task.train.learning_rate in both runs.')
  parser.add_argument('--frozen_bn', type=int, default=1, help='1: batch norm on moving statistics in both runs.')
  parser.add_argument('--log_every', type=int, default=10)
  return parser.parse_args()


ARGS = _Args()
cluster.ConfigureLocalDevices(max(2, ARGS.splits))

import numpy as np  # pylint: disable=g-import-not-at-top,g-bad-import-order
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from lingpipe.core import hyperparams  # pylint: disable=g-import-not-at-top
from lingpipe.layers import batch_norm  # pylint: disable=g-import-not-at-top
from lingpipe.model import model_registry  # pylint: disable=g-import-not-at-top


def Train(splits, micro, remat):
  p = model_registry.GetParams(ARGS.model, 'Train')
  p.task.network.Set(num_splits=splits, num_micro_batches=micro, remat=remat)
  if ARGS.lr is not None:
    p.task.train.learning_rate = ARGS.lr
  if ARGS.frozen_bn:
    for q in hyperparams.IterNested(p.task):
      if 'cls' in q and q.cls is batch_norm.BatchNormLayer:
        q.use_moving_stats_in_training = True
  task = p.task.Instantiate()
  opt, schedule = task.CreateOptimizer(), task.CreateLearningRateSchedule()
  step = tf.Variable(0, dtype=tf.int64, trainable=False)

  @tf.function(autograph=False)
  def Step(batch):
    out = task.TrainStep(batch, step, opt, schedule)
    step.assign_add(1)
    return out.loss

  losses, it = [], iter(p.input.Instantiate().GetDataset())
  losses.append(float(Step(next(it))))
  start = time.perf_counter()
  for _ in range(ARGS.steps - 1):
    losses.append(float(Step(next(it))))
  images_per_s = (ARGS.steps - 1) * p.input.batch_size / (time.perf_counter() - start)
  return np.array(losses), images_per_s


def main():
  plain, plain_speed = Train(1, 1, 'never')
  piped, piped_speed = Train(ARGS.splits, ARGS.micro, ARGS.remat)
  print('step   plain loss   K=%d,M=%d loss' % (ARGS.splits, ARGS.micro))
  for i in range(0, ARGS.steps, ARGS.log_every):
    print('%4d %14.9f %14.9f' % (i + 1, plain[i], piped[i]))
  rel = np.abs(plain - piped) / np.maximum(np.abs(plain), 1e-12)
  print('largest relative loss difference over %d steps: %.2e (at step %d)' % (ARGS.steps, rel.max(),
                                                                             rel.argmax() + 1))
  print('images/s: plain %.1f, K=%d M=%d %.1f (%.2fx)' % (plain_speed, ARGS.splits, ARGS.micro, piped_speed,
                                                         piped_speed / plain_speed))


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal.
  main()
