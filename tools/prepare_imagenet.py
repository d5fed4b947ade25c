r"""Converts a class-per-folder image tree into TFRecord shards in ImageNet's layout, which ImagenetInput reads.

    python tools/prepare_imagenet.py --source=/data/imagenet --out_dir=data/imagenet_tfrecords --num_shards=1024
    python tools/prepare_imagenet.py --write_sample_tree --out_dir=data/cifar10_as_imagenet   # a small tree to try

--source holds <split>/<class name>/*.jpg (or .jpeg, .png) for each split (e.g. train and validation). Each
example keeps the image file's bytes ('image/encoded'), its label ('image/class/label': the class folder's index
in sorted order, plus --label_offset) and class name ('image/class/text'). The shards <split>-NNNNN-of-NNNNN are
written into a temporary folder that takes the place of --out_dir when complete; an --out_dir that holds anything
but an earlier output of this tool is refused, and nothing in it is touched.
"""

import argparse
import os
import sys


import tensorflow as tf  # pylint: disable=g-import-not-at-top

from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
from lingpipe.logdir import safe_write  # pylint: disable=g-import-not-at-top
from lingpipe.tasks.image import imagenet_input  # pylint: disable=g-import-not-at-top

MARKER = 'PREPARED_BY_LINGPIPE'  # In every output folder: what may be replaced by a later run.
CIFAR10_CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')


def Splits(source):
  """The splits of `source`: its sub-folders that hold class folders of images."""
  if not os.path.isdir(source):
    raise errors.DataFileNotFoundError('--source %s is not a folder of <split>/<class>/<image> files.' % source)
  splits = [e for e in sorted(os.listdir(source)) if os.path.isdir(os.path.join(source, e))]
  if not splits:
    raise errors.DataError('--source %s has no split folders (e.g. train/, validation/).' % source)
  return splits


def _Example(encoded, label, text):
  return tf.train.Example(features=tf.train.Features(feature={
      'image/encoded': tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
      'image/class/label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
      'image/class/text': tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode('utf-8')]))
  })).SerializeToString()


def Prepare(source, out_dir, num_shards, label_offset=0, out=sys.stdout):
  """Writes every split of `source` as TFRecord shards into `out_dir` (atomically); returns {split: examples}."""
  real_source, real_out = os.path.realpath(source), os.path.realpath(out_dir)
  if real_out == real_source or real_out.startswith(real_source + os.sep) or real_source.startswith(real_out + os.sep):
    raise errors.ConfigError('--out_dir %s and --source %s overlap; nothing was written. Write the TFRecords '
                             'outside the image tree.' % (out_dir, source))
  safe_write.CheckOwnFolder(out_dir, MARKER, 'output of prepare_imagenet')
  counts = {}
  with safe_write.AtomicDirectory(out_dir, 'TFRecord folder') as tmp:
    for split in Splits(source):
      names = imagenet_input.ClassNames(source, split)
      paths, labels = imagenet_input.FolderFiles(source, split)
      shards = max(1, min(num_shards, len(paths)))
      for s in range(shards):
        with tf.io.TFRecordWriter(os.path.join(tmp, '%s-%05d-of-%05d' % (split, s, shards))) as writer:
          for i in range(s, len(paths), shards):
            try:
              with open(paths[i], 'rb') as f:
                encoded = f.read()
            except OSError as e:
              raise errors.FileSystemError('Cannot read %s: %s.' % (paths[i], e.strerror)) from e
            writer.write(_Example(encoded, labels[i] + label_offset, names[labels[i]]))
      counts[split] = len(paths)
      print('%s: %d images of %d classes in %d shards' % (split, len(paths), len(names), shards), file=out)
    safe_write.WriteMarker(tmp, MARKER, 'TFRecords of %s, written by tools/prepare_imagenet.py.' % (
        os.path.abspath(source)))
  return counts


def WriteSampleTree(out_dir):
  """Writes the CIFAR-10 sample bundled with lingpipe (500 training, 100 test images, 32 x 32) as an ImageNet-format
  tree: <out_dir>/train and <out_dir>/validation, one folder of JPEGs per CIFAR-10 class. For trying ImageNet-format
  models and tools without ImageNet; the images are CIFAR-10's, labelled as such."""
  from lingpipe.tasks.image import input_generator  # pylint: disable=g-import-not-at-top
  safe_write.CheckOwnFolder(out_dir, MARKER, 'output of prepare_imagenet')
  with safe_write.AtomicDirectory(out_dir, 'image folder') as tmp:
    for split, name in (('train', 'train'), ('test', 'validation')):
      images, labels = input_generator.Cifar10Input.Params().Set(split=split).Instantiate().Arrays()
      for i, (image, label) in enumerate(zip(images, labels)):
        folder = os.path.join(tmp, name, CIFAR10_CLASSES[label])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, '%05d.jpg' % i), 'wb') as f:
          f.write(tf.io.encode_jpeg(image, quality=95).numpy())
    safe_write.WriteMarker(tmp, MARKER, 'The bundled CIFAR-10 sample as an ImageNet-format tree, written by '
                           'tools/prepare_imagenet.py.')


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--source', help='Folder of <split>/<class name>/<image> files.')
  parser.add_argument('--out_dir', required=True, help='Folder for the TFRecord shards (or the sample tree).')
  parser.add_argument('--write_sample_tree', action='store_true', help='Instead, write the bundled CIFAR-10 sample '
                      'as an ImageNet-format tree of JPEGs into --out_dir (train/ and validation/, a folder per '
                      'class), to try ImageNet-format models without ImageNet.')
  parser.add_argument('--num_shards', type=int, default=16, help='Shards per split, at most one per image.')
  parser.add_argument('--label_offset', type=int, default=0, help='Added to every label (ImageNet\'s own '
                      'TFRecords number the classes from 1, with 0 for background: --label_offset=1).')
  args = parser.parse_args(argv)
  if args.num_shards < 1:
    print('prepare_imagenet: error: --num_shards must be at least 1, got %d.' % args.num_shards, file=sys.stderr)
    return 1
  if not args.write_sample_tree and not args.source:
    print('prepare_imagenet: error: give --source (a folder of <split>/<class>/<image> files) or '
          '--write_sample_tree.', file=sys.stderr)
    return 1
  try:
    if args.write_sample_tree:
      WriteSampleTree(args.out_dir)
    else:
      Prepare(args.source, args.out_dir, args.num_shards, args.label_offset)
  except errors.UserError as e:
    print('prepare_imagenet: error: %s' % e, file=sys.stderr)
    return 1
  print('Wrote %s' % args.out_dir)
  return 0


if __name__ == '__main__':
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()  # TensorFlow's log lines off the terminal.
  sys.exit(main())
