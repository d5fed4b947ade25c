r"""Converts CIFAR-10 into TFRecord shards that Cifar10Input streams (data_format='tfrecord').

    curl -LO https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz && tar xzf cifar-10-python.tar.gz
    python tools/prepare_cifar10.py --source=cifar-10-batches-py --out_dir=data/cifar10

Sources: the python release (above) or the binary release from https://www.cs.toronto.edu/~kriz/cifar.html, or a
JPEG copy (a .tar.gz of <split>/<class name>/*.jpg, or that tree unpacked). JPEGs are decoded with
dct_method='INTEGER_ACCURATE' (bit-exact pixels). Each example stores the raw 32x32x3 uint8 pixels and the label;
shards are written to a temporary folder and renamed when complete.
An --out_dir holding anything but an earlier output of this tool is refused, and nothing in it is touched.
"""

import argparse
import os
import re
import sys
import tarfile


import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
from lingpipe.logdir import safe_write  # pylint: disable=g-import-not-at-top
from lingpipe.tasks.image import input_generator  # pylint: disable=g-import-not-at-top

CLASS_NAMES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')
MARKER = 'PREPARED_BY_LINGPIPE'  # In every output folder: what may be replaced by a later run.
_JPEG_PATH = re.compile(r'(?:^|/)(train|test)/([a-z]+)/[^/]+\.jpe?g$')


def _Decode(data, name):
  try:
    image = tf.io.decode_jpeg(data, channels=3, dct_method='INTEGER_ACCURATE').numpy()
  except tf.errors.InvalidArgumentError as e:
    raise errors.DataError('%s is not a readable JPEG: %s' % (name, str(e).splitlines()[0])) from e
  if image.shape != (32, 32, 3):
    raise errors.DataError('%s is %s, not a 32x32 RGB CIFAR-10 image.' % (name, image.shape))
  return image


def _Label(class_name, name):
  if class_name not in CLASS_NAMES:
    raise errors.DataError('%s: unknown class folder %r; expected one of %s.' % (name, class_name,
                                                                                ', '.join(CLASS_NAMES)))
  return CLASS_NAMES.index(class_name)


def ReadJpegs(source):
  """{split: (images, labels)} from a JPEG .tar(.gz) archive or an unpacked tree of <split>/<class>/*.jpg."""
  found = {'train': ([], []), 'test': ([], [])}

  def Add(path, data):
    m = _JPEG_PATH.search(path)
    if m:
      images, labels = found[m.group(1)]
      images.append(_Decode(data, path))
      labels.append(_Label(m.group(2), path))

  if os.path.isdir(source):
    for root, _, files in sorted(os.walk(source)):
      for f in sorted(files):
        path = os.path.join(root, f)
        if _JPEG_PATH.search(path):
          with open(path, 'rb') as fh:
            Add(path, fh.read())
  else:
    try:
      with tarfile.open(source) as archive:
        for member in archive:
          if member.isfile() and _JPEG_PATH.search(member.name):
            Add(member.name, archive.extractfile(member).read())
    except tarfile.TarError as e:
      raise errors.DataError('%s is not a readable tar archive: %s' % (source, e)) from e
  out = {}
  for split, (images, labels) in found.items():
    if images:
      out[split] = (np.stack(images), np.asarray(labels, np.int32))
  if not out:
    raise errors.DataError('No <split>/<class>/*.jpg images found in %s.' % source)
  return out


def ReadSource(source):
  if not os.path.exists(source):
    raise errors.DataFileNotFoundError('--source %s does not exist.' % source)
  if os.path.isdir(source):
    try:
      fmt = input_generator.DetectFormat(source, 'train')
    except errors.DataFileNotFoundError:
      fmt = 'jpeg'
    if fmt in ('pickle', 'binary', 'npz'):
      out = {}
      for split in ('train', 'test'):
        p = input_generator.Cifar10Input.Params().Set(data_dir=source, split=split, data_format=fmt)
        out[split] = p.Instantiate().Arrays()
      return out
  return ReadJpegs(source)


def _Example(image, label):
  return tf.train.Example(features=tf.train.Features(feature={
      'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
      'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))})).SerializeToString()


def WriteShards(splits, out_dir, num_shards):
  """Writes the shards into a temporary folder that takes the place of `out_dir` when complete; an `out_dir` that
  holds anything but an earlier output of this tool is refused."""
  safe_write.CheckOwnFolder(out_dir, MARKER, 'output of prepare_cifar10')
  with safe_write.AtomicDirectory(out_dir, 'TFRecord folder') as tmp:
    for split, (images, labels) in splits.items():
      shards = num_shards if split == 'train' else max(1, num_shards // 5)
      for s in range(shards):
        path = os.path.join(tmp, '%s-%05d-of-%05d.tfrecord' % (split, s, shards))
        with tf.io.TFRecordWriter(path) as writer:
          for i in range(s, len(images), shards):
            writer.write(_Example(images[i], labels[i]))
      print('%s: %d examples in %d shards' % (split, len(images), shards))
    safe_write.WriteMarker(tmp, MARKER, 'CIFAR-10 TFRecords written by tools/prepare_cifar10.py.')


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--source', required=True, help='JPEG archive or tree, or a python/binary release folder.')
  parser.add_argument('--out_dir', required=True, help='Folder for the TFRecord shards (missing, empty, or an '
                      'earlier output of this tool, which is replaced).')
  parser.add_argument('--num_shards', type=int, default=10, help='Shards of the train split (test gets 1/5).')
  args = parser.parse_args(argv)
  try:
    WriteShards(ReadSource(args.source), args.out_dir, args.num_shards)
  except errors.UserError as e:
    print('prepare_cifar10: error: %s' % e, file=sys.stderr)
    return 1
  print('Wrote %s' % args.out_dir)
  return 0


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal.
  sys.exit(main())
