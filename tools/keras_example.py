"""A Keras CNN trained as a pipeline on the bundled CIFAR-10 sample, beside the plain Keras model.

    python tools/keras_example.py --num_splits=2 --num_micro_batches=4 --epochs=3

Builds one Keras Sequential, then fits it three ways from the same initial weights, one after another in this
process: the plain Keras model, lingpipe.keras.Pipeline with one cell and one micro-batch (lingpipe's overhead),
and the pipeline asked for. Prints each one's cells, final training loss, test accuracy and median step time (from
the second epoch on: the first one traces). On this machine the devices are logical CPU devices, one core each
(`cluster.ConfigureLocalDevices`), and the plain model runs on the same process's threads.
"""

import os
import sys
import time

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top

flags.DEFINE_integer('num_splits', 2, 'Cells K of the pipeline.')
flags.DEFINE_integer('num_micro_batches', 4, 'Micro-batches M.')
flags.DEFINE_string('remat', 'always', 'Re-materialization policy.')
flags.DEFINE_string('balance', 'flops', "How layers are cut into cells: 'flops' (estimated), 'uniform' (counts).")
flags.DEFINE_integer('epochs', 3, 'Epochs over the 500-image training sample.')
flags.DEFINE_integer('batch_size', 100, 'Batch size (the 500 training images divide into 5 batches).')
FLAGS = flags.FLAGS


class _StepTimes:
  """A Keras callback keeping each training batch's wall time."""

  def __init__(self):
    import keras  # pylint: disable=g-import-not-at-top

    times = self.times = []

    class Callback(keras.callbacks.Callback):

      def on_train_batch_begin(self, batch, logs=None):
        self.start = time.perf_counter()

      def on_train_batch_end(self, batch, logs=None):
        times.append(time.perf_counter() - self.start)

    self.callback = Callback()


def _Model(seed):
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  return keras.Sequential([
      keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255.0),
      keras.layers.Conv2D(32, 3, padding='same', activation='relu'), keras.layers.BatchNormalization(),
      keras.layers.Conv2D(32, 3, padding='same', activation='relu'), keras.layers.MaxPooling2D(),
      keras.layers.Conv2D(64, 3, padding='same', activation='relu'), keras.layers.BatchNormalization(),
      keras.layers.Conv2D(64, 3, padding='same', activation='relu'), keras.layers.MaxPooling2D(),
      keras.layers.Flatten(), keras.layers.Dropout(0.3, seed=1), keras.layers.Dense(128, activation='relu'),
      keras.layers.Dense(10)], name='cnn')


def main(argv):
  del argv
  cluster.ConfigureLocalDevices(FLAGS.num_splits)
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import lingpipe.keras  # pylint: disable=g-import-not-at-top
  from lingpipe.tasks.image import input_generator  # pylint: disable=g-import-not-at-top

  sample = input_generator.SAMPLE_DIR
  x_train, y_train = input_generator.ReadNpz(os.path.join(sample, 'train.npz'))
  x_test, y_test = input_generator.ReadNpz(os.path.join(sample, 'test.npz'))
  x_train, x_test = x_train.astype('float32'), x_test.astype('float32')
  runs = [('plain Keras', lambda m: m),
          ('lingpipe K=1 M=1', lambda m: lingpipe.keras.Pipeline(m, num_splits=1, num_micro_batches=1)),
          ('lingpipe K=%d M=%d remat=%s' % (FLAGS.num_splits, FLAGS.num_micro_batches, FLAGS.remat),
           lambda m: lingpipe.keras.Pipeline(m, num_splits=FLAGS.num_splits,
                                             num_micro_batches=FLAGS.num_micro_batches, remat=FLAGS.remat,
                                             balance=FLAGS.balance))]
  steps_per_epoch = -(-len(x_train) // FLAGS.batch_size)
  print('CIFAR-10 sample: %d training and %d test images; batch %d, %d epochs.' % (
      len(x_train), len(x_test), FLAGS.batch_size, FLAGS.epochs))
  for name, make in runs:
    model = make(_Model(seed=0))
    model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=['accuracy'])
    times = _StepTimes()
    history = model.fit(x_train, y_train, batch_size=FLAGS.batch_size, epochs=FLAGS.epochs, shuffle=False,
                        verbose=0, callbacks=[times.callback])
    _, accuracy = model.evaluate(x_test, y_test, batch_size=FLAGS.batch_size, verbose=0)
    if isinstance(model, lingpipe.keras.Pipeline):
      print('%s: cells %s' % (name, '; '.join('%s: %s' % (d, ', '.join(layers)) for d, layers in model.cells())))
    print('%-28s loss %.4f  test accuracy %.3f  median step %.1f ms' % (
        name, history.history['loss'][-1], accuracy, 1000 * np.median(times.times[steps_per_epoch:])))


if __name__ == '__main__':
  app.run(main)
