"""Keras models trained as pipelines on the data bundled in the repo, each beside the plain Keras model.

    python tools/keras_example.py --model=cnn --num_splits=2 --num_micro_batches=4 --epochs=3
    python tools/keras_example.py --model=resnet50 --num_splits=4 --num_micro_batches=4 --epochs=2
    python tools/keras_example.py --model=transformer --num_splits=2 --num_micro_batches=4 --epochs=2

--model: `cnn`, a small Keras CNN (Conv2D, BatchNormalization, Dropout) on the 500-image CIFAR-10 sample;
`resnet50`, `keras.applications.ResNet50(weights=None)` on the same images (tasks/keras/models.py), cut by
estimated flops; `transformer`, a Keras Transformer text classifier identifying the language (de, en, es, fr, ru)
of the NMT sample's Tatoeba sentences from their bytes (tasks/keras/data.py).

Builds the model, then fits it three ways from the same initial weights, one after another in this process: the
plain Keras model, lingpipe.keras.Pipeline with one cell and one micro-batch (lingpipe's overhead), and the
pipeline asked for. Prints each one's cells, final training loss, test accuracy and median step time (from the
second epoch on: the first one traces). On this machine the devices are logical CPU devices, one core each
(`cluster.ConfigureLocalDevices`), and the plain model runs on the same process's threads.
"""

import time

from absl import app
from absl import flags


from lingpipe import process_setup  # pylint: disable=g-import-not-at-top,wrong-import-position

process_setup.SetUpProcess()  # Before TensorFlow loads, as the binaries do.

from lingpipe.distributed import cluster  # pylint: disable=g-import-not-at-top,wrong-import-position


flags.DEFINE_integer('num_splits', 2, 'Cells K of the pipeline.')
flags.DEFINE_integer('num_micro_batches', 4, 'Micro-batches M.')
flags.DEFINE_string('remat', 'always', 'Re-materialization policy.')
flags.DEFINE_string('balance', 'flops', "How layers are cut into cells: 'flops' (estimated), 'uniform' (counts).")
flags.DEFINE_enum('model', 'cnn', ['cnn', 'resnet50', 'transformer'], 'Which example (see the docstring).')
flags.DEFINE_integer('epochs', 3, 'Epochs over the training sample.')
flags.DEFINE_integer('batch_size', 100, 'Batch size (a divisor of the 500 images, or of the 9500 sentences).')
flags.DEFINE_string('schedule', 'gpipe', "The pipeline's schedule: gpipe, 1f1b or interleaved_1f1b.")
flags.DEFINE_integer('repeats', 1, 'Rounds of the three fits; more than 1 prints each fit\'s step time per round '
                     'and its ratio to the plain fit of the same round.')
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


def _Cnn():
  import keras  # pylint: disable=g-import-not-at-top
  return keras.Sequential([
      keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255.0),
      keras.layers.Conv2D(32, 3, padding='same', activation='relu'), keras.layers.BatchNormalization(),
      keras.layers.Conv2D(32, 3, padding='same', activation='relu'), keras.layers.MaxPooling2D(),
      keras.layers.Conv2D(64, 3, padding='same', activation='relu'), keras.layers.BatchNormalization(),
      keras.layers.Conv2D(64, 3, padding='same', activation='relu'), keras.layers.MaxPooling2D(),
      keras.layers.Flatten(), keras.layers.Dropout(0.3, seed=1), keras.layers.Dense(128, activation='relu'),
      keras.layers.Dense(10)], name='cnn')


def _Example(name):
  """(model builder, (x_train, y_train), (x_test, y_test), optimizer builder)."""
  import keras  # pylint: disable=g-import-not-at-top
  from lingpipe.tasks.keras import data  # pylint: disable=g-import-not-at-top
  from lingpipe.tasks.keras import models  # pylint: disable=g-import-not-at-top
  if name == 'transformer':
    return (lambda: models.TransformerClassifier(seed=1)), data.LanguageId('train'), data.LanguageId('dev'), (
        lambda: keras.optimizers.Adam(2e-3))
  return (_Cnn if name == 'cnn' else models.ResNet50), data.Cifar10('train'), data.Cifar10('test'), (
      lambda: keras.optimizers.SGD(0.05 if name == 'cnn' else 0.01, momentum=0.9))


def main(argv):
  del argv
  cluster.ConfigureLocalDevices(FLAGS.num_splits)
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import lingpipe.keras  # pylint: disable=g-import-not-at-top

  builder, (x_train, y_train), (x_test, y_test), optimizer = _Example(FLAGS.model)
  runs = [('plain Keras', lambda m: m),
          ('lingpipe K=1 M=1', lambda m: lingpipe.keras.Pipeline(m, num_splits=1, num_micro_batches=1)),
          ('lingpipe K=%d M=%d remat=%s' % (FLAGS.num_splits, FLAGS.num_micro_batches, FLAGS.remat),
           lambda m: lingpipe.keras.Pipeline(m, num_splits=FLAGS.num_splits,
                                             num_micro_batches=FLAGS.num_micro_batches, remat=FLAGS.remat,
                                             balance=FLAGS.balance, schedule=FLAGS.schedule))]
  steps_per_epoch = -(-len(x_train) // FLAGS.batch_size)
  print('%s: %d training and %d test examples; batch %d, %d epochs.' % (
      FLAGS.model, len(x_train), len(x_test), FLAGS.batch_size, FLAGS.epochs))
  medians = {name: [] for name, _ in runs}
  for repeat in range(FLAGS.repeats):  # Rounds of the three fits: the machine's drift hits each alike.
    for name, make in runs:
      keras.utils.set_random_seed(0)
      model = make(builder())
      model.compile(optimizer=optimizer(),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=['accuracy'])
      times = _StepTimes()
      history = model.fit(x_train, y_train, batch_size=FLAGS.batch_size, epochs=FLAGS.epochs, shuffle=False,
                          verbose=0, callbacks=[times.callback])
      medians[name].append(1000 * np.median(times.times[steps_per_epoch:]))
      if repeat:
        continue
      _, accuracy = model.evaluate(x_test, y_test, batch_size=FLAGS.batch_size, verbose=0)
      if isinstance(model, lingpipe.keras.Pipeline):
        print('%s: cells %s' % (name, '; '.join('%s: %s .. %s (%d layers)' % (
            d, layers[0], layers[-1], len(layers)) for d, layers in model.cells())))
      print('%-28s loss %.4f  test accuracy %.3f  median step %.1f ms' % (
          name, history.history['loss'][-1], accuracy, medians[name][-1]))
  if FLAGS.repeats > 1:
    plain = np.asarray(medians[runs[0][0]])
    print('Over %d rounds (median step of each fit, ms; ratio to the plain fit of the same round):' % FLAGS.repeats)
    for name, _ in runs:
      ratios = np.asarray(medians[name]) / plain
      print('  %-28s %s  time ratio median %.3f (min %.3f, max %.3f)' % (
          name, ' '.join('%.1f' % t for t in medians[name]), np.median(ratios), ratios.min(), ratios.max()))

if __name__ == '__main__':
  app.run(main)
