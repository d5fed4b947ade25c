"""ImageNet-format input (class folders of JPEGs and TFRecords), tools/prepare_imagenet.py, and an ImageNet-format
AmoebaNet trained, evaluated and exported through the binary on the bundled CIFAR-10 sample as such a tree."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import errors
from lingpipe.tasks.image import imagenet_input

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, 'tools', 'prepare_imagenet.py')


def _Tool(*args):
  return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope='module')
def sample(tmp_path_factory):
  """(tree, tfrecords): the CIFAR-10 sample as class folders of JPEGs, and as TFRecords made from them."""
  root = tmp_path_factory.mktemp('imagenet')
  tree, records = str(root / 'tree'), str(root / 'records')
  for args in (['--write_sample_tree', '--out_dir=' + tree], ['--source=' + tree, '--out_dir=' + records,
                                                              '--num_shards=3']):
    done = _Tool(*args)
    assert done.returncode == 0, done.stderr[-2000:]
  return tree, records


def _Examples(data_dir, **kwargs):
  p = imagenet_input.ImagenetInput.Params().Set(data_dir=data_dir, split='validation', image_size=40,
                                                augment=False, shuffle=False, repeat=False, batch_size=25,
                                                drop_remainder=False, **kwargs)
  batches = list(p.Instantiate().GetDataset())
  return np.concatenate([b['image'].numpy() for b in batches]), np.concatenate([b['label'].numpy() for b in batches])


@pytest.mark.slow
def test_folders_and_tfrecords_give_the_same_examples(sample):
  tree, records = sample
  assert sorted(os.listdir(records)) == ['PREPARED_BY_LINGPIPE'] + [
      '%s-%05d-of-00003' % (split, s) for split in ('train', 'validation') for s in range(3)]
  assert imagenet_input.DetectFormat(tree, 'train') == 'folder'
  assert imagenet_input.DetectFormat(records, 'train') == 'tfrecord'
  images, labels = _Examples(tree, num_classes=10)
  assert images.shape == (100, 40, 40, 3) and -1.0 <= images.min() and images.max() <= 1.0
  assert sorted(set(labels)) == list(range(10))  # Class folders in sorted order: airplane = 0 ... truck = 9.
  record_images, record_labels = _Examples(records, num_classes=10)
  order = lambda imgs, lbls: np.lexsort([imgs.reshape(len(imgs), -1).sum(1), lbls])  # Shards interleave.
  a, b = order(images, labels), order(record_images, record_labels)
  np.testing.assert_array_equal(record_labels[b], labels[a])
  np.testing.assert_allclose(record_images[b], images[a])


@pytest.mark.slow
def test_training_crops_jitter_area_and_aspect_and_are_reproducible(sample):
  tree, _ = sample
  p = imagenet_input.ImagenetInput.Params().Set(data_dir=tree, image_size=64, batch_size=8, shuffle=False)
  first = next(iter(p.Instantiate().GetDataset()))['image'].numpy()
  again = next(iter(p.Instantiate().GetDataset()))['image'].numpy()
  center = next(iter(p.Copy().Set(augment=False).Instantiate().GetDataset()))['image'].numpy()
  assert first.shape == (8, 64, 64, 3)
  np.testing.assert_array_equal(first, again)  # The same seed, the same crops.
  assert not np.allclose(first, center)


@pytest.mark.slow
def test_mistakes_are_one_line(sample, tmp_path):
  tree, records = sample
  with pytest.raises(errors.ConfigError, match='input.data_dir is not set'):
    imagenet_input.ImagenetInput.Params().Instantiate()
  with pytest.raises(errors.DataFileNotFoundError, match='No ImageNet-format test data in .*expected a folder test'):
    imagenet_input.DetectFormat(tree, 'test')
  with pytest.raises(tf.errors.InvalidArgumentError, match=r'a label is outside \[0, 5\)'):
    _Examples(tree, num_classes=5)
  done = _Tool('--source=' + tree, '--out_dir=' + tree)
  assert done.returncode == 1 and 'overlap; nothing was written' in done.stderr
  (tmp_path / 'mine').mkdir()
  (tmp_path / 'mine' / 'notes.txt').write_text('keep')
  done = _Tool('--source=' + tree, '--out_dir=' + str(tmp_path / 'mine'))
  assert done.returncode == 1 and 'not an earlier output of prepare_imagenet; nothing was written or deleted' in (
      done.stderr)
  assert (tmp_path / 'mine' / 'notes.txt').read_text() == 'keep'
  # An earlier output is replaced whole only when it holds nothing but what the tool listed in its marker.
  notes = os.path.join(records, 'notes.txt')
  with open(notes, 'w') as f:
    f.write('keep')
  done = _Tool('--source=' + tree, '--out_dir=' + records)
  assert done.returncode == 1 and ('%s holds an earlier output of prepare_imagenet and also what lingpipe did not '
                                   'write there (notes.txt); nothing was written or deleted.' % records) in done.stderr
  assert open(notes).read() == 'keep'
  os.remove(notes)


@pytest.mark.slow
def test_an_imagenet_format_amoebanet_trains_evaluates_and_exports_through_the_binary(sample, tmp_path):
  """One cell here (the registered K=2 traces its cells for half a minute more); the auxiliary head and drop-path
  under a pipeline are test_amoebanet.py's."""
  _, records = sample
  logdir = str(tmp_path / 'run')
  trainer = [sys.executable, '-m', 'lingpipe.trainer', '--model=image.imagenet.AmoebaNetD_Small', '--logdir=' + logdir,
             "--model_params_override=input.data_dir='%s';task.network.num_splits=1;"
             "task.network.num_micro_batches=1" % records]

  def Run(*args):
    done = subprocess.run(trainer + list(args), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout

  out = Run('--max_steps=4')
  assert 'step 4/4' in out and 'aux_loss=' in out  # The auxiliary head trains beside the main softmax.
  Run('--mode=eval')
  with open(os.path.join(logdir, 'eval_test', 'metrics-4.json')) as f:
    metrics = json.load(f)['metrics']
  assert metrics['num_examples'] == 100 and 'aux_loss' not in metrics
  Run('--mode=export')
  serve = tf.saved_model.load(os.path.join(logdir, 'export', '4'))
  probs = serve.signatures['serving_default'](images=tf.zeros([2, 96, 96, 3], tf.uint8))['probs'].numpy()
  assert probs.shape == (2, 10)
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)
  # Transfer, as the paper did from ImageNet to CIFAR-10: the pre-trained network into CIFAR-10 images resized
  # to its 96 x 96, the softmax and the auxiliary head's last layer fresh.
  tuned = subprocess.run([sys.executable, '-m', 'lingpipe.trainer', '--model=image.cifar10.AmoebaNetD_Small_Transfer',
                          '--logdir=' + str(tmp_path / 'tuned'), '--max_steps=2',
                          "--model_params_override=task.train.init_from_checkpoint='%s';task.network.num_splits=1;"
                          "task.network.num_micro_batches=1" % os.path.join(logdir, 'train', 'ckpt-4')],
                         capture_output=True, text=True, timeout=600)
  assert tuned.returncode == 0, tuned.stderr[-3000:]
  line = [l for l in tuned.stdout.splitlines() if l.startswith('Initialized ')][0]
  assert '(model image.imagenet.AmoebaNetD_Small)' in line and 'step 2/2' in tuned.stdout
  fresh = line.split('fresh: ')[1].rstrip('.').split(', ')
  assert sorted(name.split('/')[0] + '/' + name.split('/')[-1] for name in fresh) == [
      'network/b', 'network/w', 'softmax/b', 'softmax/w'], fresh
