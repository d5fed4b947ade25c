"""Cifar10Input: every format (bundled npz, python and binary releases, TFRecords), augmentation, errors."""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from lingpipe.core import errors
from lingpipe.tasks.image import input_generator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _Params(**kw):
  p = input_generator.Cifar10Input.Params().Set(batch_size=10, shuffle=False, repeat=False, drop_remainder=False,
                                                augment=False)
  return p.Set(**kw)


def _All(p):
  images, labels = [], []
  for batch in p.Instantiate().GetDataset():
    images.append(batch.image.numpy())
    labels.append(batch.label.numpy())
  return np.concatenate(images), np.concatenate(labels)


@pytest.fixture(scope='module')
def sample():
  with np.load(os.path.join(input_generator.SAMPLE_DIR, 'test.npz')) as data:
    return data['x'], data['y'].astype(np.int32)


def test_bundled_sample(sample):
  images, labels = _All(_Params(split='test'))
  assert images.shape == (100, 32, 32, 3) and np.bincount(labels).tolist() == [10] * 10
  np.testing.assert_allclose(images, input_generator.Normalize(sample[0]).numpy(), rtol=1e-6)
  np.testing.assert_array_equal(labels, sample[1])
  train = _Params(split='train').Instantiate().Arrays()
  assert train[0].shape == (500, 32, 32, 3)


def _WriteReleases(tmp_path, images, labels):
  """The sample as the python and binary CIFAR-10 releases (test_batch, test_batch.bin)."""
  chw = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
  py_dir, bin_dir = tmp_path / 'cifar-10-batches-py', tmp_path / 'cifar-10-batches-bin'
  py_dir.mkdir()
  bin_dir.mkdir()
  with open(py_dir / 'test_batch', 'wb') as f:
    pickle.dump({b'data': chw, b'labels': labels.tolist()}, f)
  records = np.concatenate([labels.astype(np.uint8)[:, None], chw], axis=1)
  records.tofile(bin_dir / 'test_batch.bin')
  return str(py_dir), str(bin_dir)


@pytest.mark.slow
def test_python_binary_and_tfrecord_formats_read_the_same_pixels(sample, tmp_path):
  py_dir, bin_dir = _WriteReleases(tmp_path, *sample)
  reference = _All(_Params(split='test'))
  for data_dir, fmt in ((py_dir, 'pickle'), (bin_dir, 'binary')):
    assert _Params(split='test', data_dir=data_dir).Instantiate().data_format == fmt
    for got, want in zip(_All(_Params(split='test', data_dir=data_dir)), reference):
      np.testing.assert_array_equal(got, want)
  # tools/prepare_cifar10.py converts the sample (npz) to TFRecords, streamed back identically.
  out_dir = str(tmp_path / 'tfrecords')
  result = subprocess.run([sys.executable, os.path.join(ROOT, 'tools', 'prepare_cifar10.py'),
                           '--source=' + input_generator.SAMPLE_DIR, '--out_dir=' + out_dir, '--num_shards=5'],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr
  assert 'test: 100 examples in 1 shards' in result.stdout
  p = _Params(split='test', data_dir=out_dir)
  assert p.Instantiate().data_format == 'tfrecord'
  images, labels = _All(p)
  order = np.lexsort(images.reshape(100, -1).T[:50])  # Shards interleave examples: compare as sets.
  ref_order = np.lexsort(reference[0].reshape(100, -1).T[:50])
  np.testing.assert_array_equal(images[order], reference[0][ref_order])
  np.testing.assert_array_equal(labels[order], reference[1][ref_order])


def test_augmentation_is_seeded_and_changes_every_epoch():
  p = _Params(split='test', augment=True, repeat=True, seed=3)
  it = iter(p.Instantiate().GetDataset())
  epoch1 = np.concatenate([next(it).image.numpy() for _ in range(10)])
  epoch2 = np.concatenate([next(it).image.numpy() for _ in range(10)])
  again = next(iter(p.Instantiate().GetDataset())).image.numpy()
  np.testing.assert_array_equal(again, epoch1[:10])
  assert not np.array_equal(epoch1, epoch2)
  assert (epoch1 == 0).all(axis=-1).any()  # Cutout zeroed a square somewhere.


def test_errors(tmp_path):
  with pytest.raises(errors.DataFileNotFoundError, match='data_dir /nonexistent does not exist'):
    _All(_Params(data_dir='/nonexistent'))
  with pytest.raises(errors.DataFileNotFoundError, match='No CIFAR-10 test data in .*expected test.npz'):
    _All(_Params(split='test', data_dir=str(tmp_path)))
  bad = tmp_path / 'bad'
  bad.mkdir()
  (bad / 'test_batch.bin').write_bytes(b'\x00' * 100)
  for name in ('data_batch_%d.bin' % i for i in range(1, 6)):
    (bad / name).write_bytes(b'')
  with pytest.raises(errors.DataError, match='not a multiple of the 3073-byte record'):
    _All(_Params(split='test', data_dir=str(bad)))
  (tmp_path / 'test.npz').write_bytes(b'not a zip')
  with pytest.raises(errors.DataError, match='is not a whole CIFAR-10 .npz'):
    _All(_Params(split='test', data_dir=str(tmp_path)))
  # Truncated: it opens as a zip (zipfile.BadZipFile was a traceback).
  sample = os.path.join(os.path.dirname(input_generator.__file__), 'data', 'cifar10_sample', 'test.npz')
  (tmp_path / 'test.npz').write_bytes(open(sample, 'rb').read()[:5000])
  with pytest.raises(errors.DataError, match='is not a whole CIFAR-10 .npz .*truncated or damaged'):
    _All(_Params(split='test', data_dir=str(tmp_path)))
  with pytest.raises(errors.ConfigError, match="data_format must be one of .*Did you mean: pickle"):
    _Params(data_format='pickel').Instantiate()
