"""ImageNet-format input: a class-per-folder tree of JPEG/PNG images, or TFRecords of tf.train.Examples.

Formats (`data_format`, or 'auto' to detect from what is in `data_dir`):
  - 'folder':   <data_dir>/<split>/<class name>/<image>.jpg|.jpeg|.png; labels are the class folders' indices in
                sorted order (ClassNames);
  - 'tfrecord': <data_dir>/<split>-*, Examples with 'image/encoded' (JPEG or PNG bytes) and 'image/class/label'
                (int64), the layout of ImageNet's own conversion scripts and of tools/prepare_imagenet.py.
Training augmentation as the reference AmoebaNet's (Inception's): a random crop covering 8-100% of the image with
aspect ratio 3/4-4/3, resized to image_size, and a horizontal flip; evaluation takes the central 87.5% and resizes
it. Pixels are scaled to [-1, 1] (Normalize), as Inception preprocessing does; deterministic for a given seed.
"""

import glob
import os

import tensorflow as tf

from lingpipe.core import base_input_generator
from lingpipe.core import errors
from lingpipe.core import param_checks

FORMATS = ('auto', 'folder', 'tfrecord')
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')
EVAL_CROP = 0.875


def Normalize(images):
  """uint8 (or float in [0, 255]) images -> float32 in [-1, 1]."""
  return tf.cast(images, tf.float32) / 127.5 - 1.0


def ClassNames(data_dir, split):
  """The sorted class folder names of <data_dir>/<split> (a folder-format tree)."""
  root = os.path.join(data_dir, split)
  try:
    names = sorted(e for e in os.listdir(root) if os.path.isdir(os.path.join(root, e)))
  except OSError as e:
    raise errors.DataFileNotFoundError('Cannot read the %s images in %s: %s.' % (split, root, e.strerror)) from e
  if not names:
    raise errors.DataError('%s has no class folders: expected <class name>/<image>.jpg under it.' % root)
  return names


def FolderFiles(data_dir, split):
  """(paths, labels) of the images under <data_dir>/<split>/<class>/, labels by sorted class folder."""
  paths, labels = [], []
  for label, name in enumerate(ClassNames(data_dir, split)):
    folder = os.path.join(data_dir, split, name)
    for entry in sorted(os.listdir(folder)):
      if entry.lower().endswith(IMAGE_EXTENSIONS):
        paths.append(os.path.join(folder, entry))
        labels.append(label)
  if not paths:
    raise errors.DataError('%s has class folders but no %s images in them.' % (
        os.path.join(data_dir, split), '/'.join(IMAGE_EXTENSIONS)))
  return paths, labels


def TFRecordFiles(data_dir, split):
  return sorted(glob.glob(os.path.join(data_dir, split + '-*')))


def DetectFormat(data_dir, split):
  """'folder' or 'tfrecord' for the data in data_dir, or a DataError that says what was expected."""
  if not os.path.isdir(data_dir):
    raise errors.DataFileNotFoundError('ImageNet-format data_dir %s does not exist. Expected <split>/<class>/*.jpg '
                                       'folders or <split>-* TFRecords (tools/prepare_imagenet.py).' % data_dir)
  if TFRecordFiles(data_dir, split):
    return 'tfrecord'
  if os.path.isdir(os.path.join(data_dir, split)):
    return 'folder'
  raise errors.DataFileNotFoundError(
      'No ImageNet-format %s data in %s: expected a folder %s/<class>/*.jpg or TFRecords %s-*. Found: %s.' % (
          split, data_dir, split, split, ', '.join(sorted(os.listdir(data_dir))[:10]) or 'nothing'))


def ParseExample(serialized):
  """A tf.train.Example with image/encoded and image/class/label -> {'encoded': string, 'label': int32}."""
  features = tf.io.parse_single_example(serialized, {
      'image/encoded': tf.io.FixedLenFeature([], tf.string),
      'image/class/label': tf.io.FixedLenFeature([], tf.int64)})
  return {'encoded': features['image/encoded'], 'label': tf.cast(features['image/class/label'], tf.int32)}


def Decode(encoded):
  """JPEG or PNG bytes -> uint8 [h, w, 3]."""
  return tf.ensure_shape(tf.io.decode_image(encoded, channels=3, expand_animations=False), [None, None, 3])


def TrainCrop(image, image_size, seed):
  """A random crop of 8-100% of the area with aspect ratio 3/4-4/3, resized, and a random flip: float32 [0, 255]."""
  seeds = tf.random.experimental.stateless_split(seed, 2)
  begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
      tf.shape(image), tf.zeros([1, 0, 4]), seeds[0], min_object_covered=0.1, aspect_ratio_range=(3 / 4, 4 / 3),
      area_range=(0.08, 1.0), max_attempts=100, use_image_if_no_bounding_boxes=True)
  crop = tf.slice(image, begin, size)
  resized = tf.image.resize(crop, [image_size, image_size], method='bilinear')
  return tf.image.stateless_random_flip_left_right(resized, seeds[1])


def EvalCrop(image, image_size):
  """The central 87.5% of the image, resized: float32 [0, 255]."""
  crop = tf.image.central_crop(image, EVAL_CROP)
  return tf.image.resize(crop, [image_size, image_size], method='bilinear')


class ImagenetInput(base_input_generator.BaseInputGenerator):
  """Examples {'image': float32 [image_size, image_size, 3] in [-1, 1], 'label': int32}."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('split', 'train', "The split: 'train', 'validation' or any folder or TFRecord prefix in data_dir.")
    p.Define('data_dir', None, 'Folder of the data (see the module docstring for the layouts).')
    p.Define('data_format', 'auto', 'One of %s.' % ', '.join(FORMATS))
    p.Define('image_size', 224, 'Height and width of the images fed to the model.', check=param_checks.Int(8))
    p.Define('augment', True, 'Random crop (area and aspect jitter) and flip; else the central crop.')
    p.Define('num_classes', 0, 'Labels must be below it (0: no check; folder data: the number of class folders).',
             check=param_checks.Int(0))
    p.Define('label_offset', 0, 'Added to every label (e.g. -1 for ImageNet TFRecords labelled 1..1000).')
    p.Define('num_examples', 0, 'Use only the first num_examples examples (0: all).', check=param_checks.Int(0))
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    if not p.data_dir:
      raise errors.ConfigError('input.data_dir is not set: give the folder of the ImageNet-format data (class '
                               'folders of JPEGs, or TFRecords from tools/prepare_imagenet.py).')
    if p.data_format not in FORMATS:
      raise errors.ConfigError('input.data_format must be one of %s, got %r.%s' % (
          ', '.join(FORMATS), p.data_format, errors.DidYouMean(str(p.data_format), FORMATS)))

  @property
  def data_format(self):
    p = self.params
    return DetectFormat(p.data_dir, p.split) if p.data_format == 'auto' else p.data_format

  def _Examples(self):
    p = self.params
    if self.data_format == 'tfrecord':
      files = TFRecordFiles(p.data_dir, p.split)
      if not files:
        raise errors.DataFileNotFoundError('No TFRecords %s-* in %s.' % (p.split, p.data_dir))
      ds = tf.data.TFRecordDataset(files).map(ParseExample, num_parallel_calls=p.num_parallel_calls)
    else:
      paths, labels = FolderFiles(p.data_dir, p.split)
      ds = tf.data.Dataset.from_tensor_slices({'path': paths, 'label': labels}).map(
          lambda e: {'encoded': tf.io.read_file(e['path']), 'label': tf.cast(e['label'], tf.int32)},
          num_parallel_calls=p.num_parallel_calls)
    return ds.take(p.num_examples) if p.num_examples else ds

  def _Preprocess(self, example, index):
    p = self.params
    image = Decode(example['encoded'])
    if p.augment:
      seed = tf.stack([tf.constant(p.seed, tf.int64), index])  # New for every example and epoch, reproducible.
      image = TrainCrop(image, p.image_size, seed)
    else:
      image = EvalCrop(image, p.image_size)
    label = example['label'] + p.label_offset
    if p.num_classes:
      check = tf.debugging.assert_equal(
          tf.logical_and(label >= 0, label < p.num_classes), True,
          message='input %s: a label is outside [0, %d) (input.num_classes %d, input.label_offset %d)' % (
              p.data_dir, p.num_classes, p.num_classes, p.label_offset))
      with tf.control_dependencies([check]):
        label = tf.identity(label)
    return {'image': Normalize(tf.ensure_shape(image, [p.image_size, p.image_size, 3])), 'label': label}
