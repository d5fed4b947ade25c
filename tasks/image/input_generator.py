"""CIFAR-10 input: the bundled sample, the standard public releases, or TFRecord shards.

Formats (`data_format`, or 'auto' to detect from the files in `data_dir`):
  - 'npz':      <data_dir>/<split>.npz with x (N, 32, 32, 3) uint8 and y labels (the sample bundled in the repo);
  - 'pickle':   the "CIFAR-10 python version" (cifar-10-batches-py: data_batch_1..5, test_batch);
  - 'binary':   the "CIFAR-10 binary version" (cifar-10-batches-bin: data_batch_1..5.bin, test_batch.bin);
  - 'tfrecord': <data_dir>/<split>-*.tfrecord written by tools/prepare_cifar10.py (e.g. from the JPEG archive).
Training augmentation for training from scratch at 32 x 32 (the common CIFAR recipe; the GPipe paper fine-tuned
ImageNet models at 480 x 480 instead): random crop of the image padded by 4, horizontal flip, cutout; then
per-channel normalization. Deterministic for a given seed.
"""

import glob
import os
import pickle
import zipfile
import zlib

import numpy as np
import tensorflow as tf

from lingpipe.core import base_input_generator
from lingpipe.core import errors
from lingpipe.core import param_checks
from lingpipe.tasks.image import imagenet_input

SAMPLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'cifar10_sample')
IMAGE_SIZE = 32
NUM_CLASSES = 10
FORMATS = ('auto', 'npz', 'pickle', 'binary', 'tfrecord')
# Per-channel mean and stddev of the CIFAR-10 training images, in [0, 255].
MEAN = (125.3, 123.0, 113.9)
STDDEV = (63.0, 62.1, 66.7)
_PICKLE_FILES = {'train': ['data_batch_%d' % i for i in range(1, 6)], 'test': ['test_batch']}
_BINARY_FILES = {s: [f + '.bin' for f in files] for s, files in _PICKLE_FILES.items()}


def Normalize(images):
  """uint8 (or float in [0, 255]) images -> float32, zero mean and unit variance per channel."""
  images = tf.cast(images, tf.float32)
  return (images - tf.constant(MEAN)) / tf.constant(STDDEV)


def DetectFormat(data_dir, split):
  """The format of the CIFAR-10 files in data_dir for split, or a DataError that says what was expected."""
  if not os.path.isdir(data_dir):
    raise errors.DataFileNotFoundError('CIFAR-10 data_dir %s does not exist. Expected <split>.npz, the python or '
                                       'binary CIFAR-10 release, or TFRecords from tools/prepare_cifar10.py.' %
                                       data_dir)
  if os.path.exists(os.path.join(data_dir, split + '.npz')):
    return 'npz'
  if glob.glob(os.path.join(data_dir, split + '-*.tfrecord')):
    return 'tfrecord'
  if all(os.path.exists(os.path.join(data_dir, f)) for f in _BINARY_FILES[split]):
    return 'binary'
  if all(os.path.exists(os.path.join(data_dir, f)) for f in _PICKLE_FILES[split]):
    return 'pickle'
  raise errors.DataFileNotFoundError(
      'No CIFAR-10 %s data in %s: expected %s.npz, %s-*.tfrecord (tools/prepare_cifar10.py), the python release '
      '(%s) or the binary release (%s). Found: %s.' % (
          split, data_dir, split, split, ', '.join(_PICKLE_FILES[split]), ', '.join(_BINARY_FILES[split]),
          ', '.join(sorted(os.listdir(data_dir))[:10]) or 'nothing'))


def _Require(path, what):
  if not os.path.exists(path):
    raise errors.DataFileNotFoundError('Missing %s: %s.' % (what, path))


def ReadNpz(path):
  _Require(path, 'CIFAR-10 .npz file')
  try:
    with np.load(path, allow_pickle=False) as data:
      images, labels = data['x'], data['y']
  except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:  # Truncated, damaged.
    raise errors.DataError('%s is not a whole CIFAR-10 .npz with arrays x (N, 32, 32, 3) uint8 and y (truncated or '
                           'damaged?): %s' % (path, e)) from e
  return _Check(path, images, labels)


def ReadPickle(paths):
  images, labels = [], []
  for path in paths:
    _Require(path, 'CIFAR-10 python-release batch')
    try:
      with open(path, 'rb') as f:
        batch = pickle.load(f, encoding='bytes')
      data, batch_labels = batch[b'data'], batch[b'labels']
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError) as e:
      raise errors.DataError('%s is not a CIFAR-10 python-release batch (a pickled dict with data and labels): '
                             '%s' % (path, e)) from e
    images.append(np.asarray(data, np.uint8).reshape(-1, 3, IMAGE_SIZE, IMAGE_SIZE).transpose(0, 2, 3, 1))
    labels.append(np.asarray(batch_labels))
  return _Check(paths[0], np.concatenate(images), np.concatenate(labels))


def ReadBinary(paths):
  record = 1 + 3 * IMAGE_SIZE * IMAGE_SIZE
  images, labels = [], []
  for path in paths:
    _Require(path, 'CIFAR-10 binary-release batch')
    raw = np.fromfile(path, np.uint8)
    if raw.size == 0 or raw.size % record:
      raise errors.DataError('%s is not a CIFAR-10 binary batch: %d bytes is not a multiple of the %d-byte record '
                             '(1 label byte + 3072 pixel bytes).' % (path, raw.size, record))
    raw = raw.reshape(-1, record)
    labels.append(raw[:, 0])
    images.append(raw[:, 1:].reshape(-1, 3, IMAGE_SIZE, IMAGE_SIZE).transpose(0, 2, 3, 1))
  return _Check(paths[0], np.concatenate(images), np.concatenate(labels))


def _Check(path, images, labels):
  if images.dtype != np.uint8 or images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE, 3) or len(images) != len(labels):
    raise errors.DataError('%s: expected uint8 images (N, 32, 32, 3) and N labels, got %s %s and %d labels.' % (
        path, images.dtype, images.shape, len(labels)))
  if len(labels) and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
    raise errors.DataError('%s: labels must be in [0, %d), found %d..%d.' % (path, NUM_CLASSES, labels.min(),
                                                                            labels.max()))
  return images, labels.astype(np.int32)


def ParseTFRecord(serialized):
  """An example written by tools/prepare_cifar10.py -> {'image': uint8 [32, 32, 3], 'label': int32}."""
  features = tf.io.parse_single_example(serialized, {
      'image': tf.io.FixedLenFeature([], tf.string), 'label': tf.io.FixedLenFeature([], tf.int64)})
  image = tf.reshape(tf.io.decode_raw(features['image'], tf.uint8), [IMAGE_SIZE, IMAGE_SIZE, 3])
  return {'image': image, 'label': tf.cast(features['label'], tf.int32)}


class Cifar10Input(base_input_generator.BaseInputGenerator):
  """Examples {'image': float32 [32, 32, 3] normalized, 'label': int32}."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('split', 'train', "'train' or 'test'.")
    p.Define('data_dir', SAMPLE_DIR, 'Folder of the CIFAR-10 files (default: the 500/100-image sample in the repo).')
    p.Define('data_format', 'auto', 'One of %s.' % ', '.join(FORMATS))
    p.Define('augment', True, 'Random crop (padding crop_padding), horizontal flip and cutout.')
    p.Define('crop_padding', 4, 'Pixels of zero padding before the random 32x32 crop.')
    p.Define('cutout_size', 16, 'Side of the square zeroed by cutout (after normalization); 0 disables it.')
    p.Define('num_examples', 0, 'Use only the first num_examples examples (0: all).')
    p.Define('image_size', IMAGE_SIZE, 'Height and width fed to the model: larger images are resized up '
             '(bilinear) after the crop and flip, as for fine-tuning a model trained at a larger size.',
             check=param_checks.Int(8))
    p.Define('normalization', 'cifar', "'cifar' (CIFAR-10's per-channel mean and deviation) or 'inception' (to "
             "[-1, 1], as ImageNet-format models are trained: imagenet_input.py).",
             check=param_checks.OneOf('cifar', 'inception'))
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if p.split not in ('train', 'test'):
      raise errors.ConfigError("input.split must be 'train' or 'test', got %r." % p.split)
    if p.data_format not in FORMATS:
      raise errors.ConfigError('input.data_format must be one of %s, got %r.%s' % (
          ', '.join(FORMATS), p.data_format, errors.DidYouMean(p.data_format, FORMATS)))

  @property
  def data_format(self):
    p = self.params
    return DetectFormat(p.data_dir, p.split) if p.data_format == 'auto' else p.data_format

  def Arrays(self):
    """(images uint8 [N, 32, 32, 3], labels int32 [N]) for the in-memory formats."""
    p, fmt = self.params, self.data_format
    if fmt == 'npz':
      images, labels = ReadNpz(os.path.join(p.data_dir, p.split + '.npz'))
    elif fmt == 'pickle':
      images, labels = ReadPickle([os.path.join(p.data_dir, f) for f in _PICKLE_FILES[p.split]])
    elif fmt == 'binary':
      images, labels = ReadBinary([os.path.join(p.data_dir, f) for f in _BINARY_FILES[p.split]])
    else:
      raise errors.ConfigError('Arrays() reads npz, pickle and binary data, not %s.' % fmt)
    if p.num_examples:
      images, labels = images[:p.num_examples], labels[:p.num_examples]
    return images, labels

  def _Examples(self):
    p = self.params
    if self.data_format == 'tfrecord':
      files = sorted(glob.glob(os.path.join(p.data_dir, p.split + '-*.tfrecord')))
      ds = tf.data.TFRecordDataset(files).map(ParseTFRecord, num_parallel_calls=p.num_parallel_calls)
      return ds.take(p.num_examples) if p.num_examples else ds
    images, labels = self.Arrays()
    return tf.data.Dataset.from_tensor_slices({'image': images, 'label': labels})

  def _Preprocess(self, example, index):
    p = self.params
    image = example['image']
    normalize = Normalize if p.normalization == 'cifar' else imagenet_input.Normalize
    if p.augment:
      seed = tf.stack([tf.constant(p.seed, tf.int64), index])  # New for every example and epoch, reproducible.
      image = Augment(image, p.crop_padding, p.cutout_size, seed, p.image_size, normalize)
    else:
      image = normalize(_Resized(image, p.image_size))
    return {'image': image, 'label': example['label']}


def _Resized(image, size):
  return image if size == IMAGE_SIZE else tf.image.resize(tf.cast(image, tf.float32), [size, size])


def Augment(image, crop_padding, cutout_size, seed, image_size=IMAGE_SIZE, normalize=Normalize):
  """Random padded crop and horizontal flip of a uint8 image, resizing to image_size, normalization, then cutout
  (cutout_size pixels of the resized image); stateless in `seed`."""
  seeds = tf.random.experimental.stateless_split(seed, 3)
  padded = tf.pad(image, [[crop_padding, crop_padding], [crop_padding, crop_padding], [0, 0]])
  image = tf.image.stateless_random_crop(padded, [IMAGE_SIZE, IMAGE_SIZE, 3], seeds[0])
  image = tf.image.stateless_random_flip_left_right(image, seeds[1])
  image = normalize(_Resized(image, image_size))
  if cutout_size:
    center = tf.random.stateless_uniform([2], seeds[2], 0, image_size, tf.int32)
    rows = tf.range(image_size)[:, None]
    cols = tf.range(image_size)[None, :]
    half = cutout_size // 2
    inside = ((rows >= center[0] - half) & (rows < center[0] + cutout_size - half) &
              (cols >= center[1] - half) & (cols < center[1] + cutout_size - half))
    image *= 1.0 - tf.cast(inside, tf.float32)[..., None]
  return image
