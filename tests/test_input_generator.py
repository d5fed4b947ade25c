"""BaseInputGenerator through the synthetic input: batching, determinism, finite eval sets, errors."""

import numpy as np
import pytest

from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.tasks.synthetic import input_generator


def _Params(**kw):
  p = input_generator.SyntheticClassificationInput.Params().Set(num_examples=100, input_dim=3, num_classes=3,
                                                                batch_size=8)
  return p.Set(**kw)


def _Batches(p, n):
  it = iter(p.Instantiate().GetDataset())
  return [next(it) for _ in range(n)]


def test_batches_are_nested_maps_of_the_right_shape():
  batch = _Batches(_Params(), 1)[0]
  assert isinstance(batch, NestedMap)
  assert batch.features.shape == (8, 3) and batch.labels.shape == (8,)
  assert batch.labels.dtype.name == 'int32'


def test_same_seed_same_order_other_seed_other_order():
  a = [b.labels.numpy() for b in _Batches(_Params(seed=1), 20)]
  b = [b.labels.numpy() for b in _Batches(_Params(seed=1), 20)]
  c = [b.labels.numpy() for b in _Batches(_Params(seed=2), 20)]
  np.testing.assert_array_equal(np.concatenate(a), np.concatenate(b))
  assert not np.array_equal(np.concatenate(a), np.concatenate(c))


def test_one_pass_for_evaluation():
  p = _Params(repeat=False, shuffle=False, drop_remainder=False)
  batches = list(p.Instantiate().GetDataset())
  assert sum(int(b.labels.shape[0]) for b in batches) == 100


def test_train_and_test_share_centres_but_not_examples():
  train = _Params(split='train').Instantiate().Arrays()
  test = _Params(split='test').Instantiate().Arrays()
  assert not np.array_equal(train[0], test[0])
  # Class means agree: the same clusters.
  for c in range(3):
    assert np.linalg.norm(train[0][train[1] == c].mean(0) - test[0][test[1] == c].mean(0)) < 1.0


def test_errors():
  with pytest.raises(errors.ConfigError, match="input.split must be one of train, test, got 'tarin'"):
    _Params(split='tarin').Instantiate()
  with pytest.raises(errors.ConfigError, match='Param batch_size: 0 is not allowed; expected an int >= 1.'):
    _Params(batch_size=0)
