"""The multilingual Transformer: pipeline transparency, cached decoding, beam search, paper sizes."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core.nested_map import NestedMap
from lingpipe.model import model_registry
from lingpipe.tasks.mt import beam_search
from lingpipe.tasks.mt import model
import pipeline_test_util as util

VOCAB = 40


def _Task(num_splits=1, num_micro_batches=1, remat='never', dropout_prob=0.0, **kwargs):
  p = model.TransformerMT.Params().Set(name='mt', vocab_size=VOCAB, model_dim=16, num_layers=2, hidden_dim=32,
                                       num_heads=2, dropout_prob=dropout_prob, **kwargs)
  p.network.Set(num_splits=num_splits, num_micro_batches=num_micro_batches, remat=remat)
  return p.Instantiate()


def _Batch(batch=8, src_len=7, tgt_len=6, seed=1):
  """A padded batch: every row has its own source and target length."""
  rng = np.random.RandomState(seed)
  src_lens = rng.randint(2, src_len + 1, size=batch)
  tgt_lens = rng.randint(1, tgt_len + 1, size=batch)
  src_pad = (np.arange(src_len)[None] >= src_lens[:, None]).astype(np.float32)
  tgt_pad = (np.arange(tgt_len)[None] >= tgt_lens[:, None]).astype(np.float32)
  src = np.where(src_pad > 0, 0, rng.randint(3, VOCAB, size=(batch, src_len)))
  labels = np.where(tgt_pad > 0, 0, rng.randint(3, VOCAB, size=(batch, tgt_len)))
  tgt = np.where(tgt_pad > 0, 0, np.concatenate([np.ones([batch, 1], int), labels[:, :-1]], 1))
  return NestedMap(src_ids=tf.constant(src, tf.int32), src_paddings=tf.constant(src_pad),
                   tgt_ids=tf.constant(tgt, tf.int32), tgt_labels=tf.constant(labels, tf.int32),
                   tgt_paddings=tf.constant(tgt_pad), pair=tf.zeros([batch], tf.int32),
                   index=tf.range(batch))


def _LossAndGrads(task, batch, step=3):
  @tf.function(autograph=False)
  def Run(batch):
    with context.Training(True), context.StepSeed(step):
      loss, _, grads = task.ComputeGradients(batch)
    return loss, [tf.convert_to_tensor(g) for g in grads]
  return Run(batch)


@pytest.mark.parametrize('k,m', list(itertools.product([1, 2, 4], [1, 4])))
@pytest.mark.slow
def test_pipelined_transformer_matches_the_plain_one_on_padded_batches(k, m):
  batch = _Batch()
  plain, pipe = _Task(), _Task(num_splits=k, num_micro_batches=m, remat='always')
  assert [v.name for v in plain.trainable_variables] == [v.name for v in pipe.trainable_variables]
  util.AssertClose(_LossAndGrads(plain, batch), _LossAndGrads(pipe, batch))


@pytest.mark.slow
def test_dropout_masks_are_redrawn_identically_by_the_recompute():
  batch = _Batch()
  stored = _Task(num_splits=2, num_micro_batches=4, remat='never', dropout_prob=0.3)
  recomputed = _Task(num_splits=2, num_micro_batches=4, remat='always', dropout_prob=0.3)
  no_dropout = _Task(num_splits=2, num_micro_batches=4, remat='always', dropout_prob=0.0)
  util.AssertClose(_LossAndGrads(stored, batch), _LossAndGrads(recomputed, batch))
  assert abs(float(_LossAndGrads(no_dropout, batch)[0]) - float(_LossAndGrads(stored, batch)[0])) > 1e-3


def test_scaled_initialization_shrinks_residual_output_projections():
  scaled, plain = _Task(scaled_init=True), _Task(scaled_init=False)
  by_name = lambda task: {v.name: np.std(v.numpy()) for v in task.trainable_variables}
  s, p = by_name(scaled), by_name(plain)
  out_proj = [n for n in s if n.endswith('ffn_out/w:0') or n.endswith('attention/wo:0')]
  assert len(out_proj) == 2 * 2 + 2 * 3  # Encoder layers: attention, ffn; decoder layers: self, cross, ffn.
  for name in out_proj:
    np.testing.assert_allclose(s[name] / p[name], 1 / np.sqrt(2 * 2), rtol=1e-5)  # 1/sqrt(2L), L=2.
  assert s['mt/network/sub_1/ffn_in/w:0'] == p['mt/network/sub_1/ffn_in/w:0']


def _NoCacheStep(task, src_ids, src_paddings, beam_size):
  """A step function that re-runs the whole decoder over the prefix (no cache): the reference for the cache."""
  encoded = beam_search.TileBeams(task.Encode(src_ids, src_paddings), beam_size)
  paddings = beam_search.TileBeams(src_paddings, beam_size)

  def Step(ids, t, state):
    prefix = tf.concat([state.prefix[:, :t], ids[:, None], state.prefix[:, t + 1:]], 1)
    x = task.embedding.Embed(prefix, tf.range(tf.shape(prefix)[1]))
    h = NestedMap(x=x, paddings=tf.zeros(tf.shape(prefix), tf.float32), encoded=encoded, encoded_paddings=paddings)
    for layer in task.decoder_layers:
      h = layer.FProp(h)
    logits = tf.gather(task.output_softmax.Logits(h.x), t, axis=1)
    return tf.nn.log_softmax(logits), NestedMap(prefix=prefix)

  return Step


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16'])
def test_decoding_with_the_cache_equals_decoding_without_it(dtype):
  task = _Task(num_splits=2, fprop_dtype=dtype)
  batch = _Batch(batch=3)
  max_len, beam = 6, 3
  with context.Training(False):
    cached = task.BeamDecode(batch.src_ids, batch.src_paddings, beam_size=beam, max_len=max_len)
    step = _NoCacheStep(task, batch.src_ids, batch.src_paddings, beam)
    state = NestedMap(prefix=tf.zeros([3 * beam, max_len], tf.int32))
    uncached = beam_search.BeamSearch(step, state, 3, beam, max_len, 1, 2, task.params.length_alpha)
  np.testing.assert_array_equal(cached.ids, uncached.ids)
  assert cached.scores.dtype == tf.float32  # Log-probabilities in float32 whatever the compute dtype.
  np.testing.assert_allclose(cached.scores, uncached.scores, rtol=1e-5 if dtype == 'float32' else 1e-2)


def _BruteForce(logp_fn, vocab, max_len, eos, alpha):
  """Every sequence that ends in </s> within max_len tokens, scored as BeamSearch scores it, best first."""
  results = []
  for length in range(1, max_len + 1):
    for body in itertools.product([v for v in range(vocab) if v != eos], repeat=length - 1):
      seq, total, h = list(body) + [eos], 0.0, 0
      for token in seq:
        total += logp_fn(h)[token]
        h = (h * 7 + token + 1) % 101
      results.append((total / ((5.0 + length) / 6.0) ** alpha, seq))
  return sorted(results, key=lambda r: -r[0])


@pytest.mark.parametrize('alpha', [0.0, 0.6, 2.0])
def test_beam_search_finds_the_brute_force_best(alpha):
  vocab, max_len, eos = 4, 4, 2
  table = np.log(np.random.RandomState(5).dirichlet(np.ones(vocab) * 0.7, size=101)).astype(np.float32)
  logp_fn = lambda h: table[h]

  def Step(ids, t, state):  # Log-probabilities depend on the whole prefix through a rolling hash.
    h = tf.where(tf.equal(t, 0), tf.zeros_like(state.h), (state.h * 7 + ids + 1) % 101)
    return tf.gather(tf.constant(table), h), NestedMap(h=h)

  expected = _BruteForce(logp_fn, vocab, max_len, eos, alpha)
  beam = vocab ** max_len  # Wide enough to be exhaustive.
  out = beam_search.BeamSearch(Step, NestedMap(h=tf.zeros([beam], tf.int32)), 1, beam, max_len, 0, eos, alpha)
  for i in range(5):
    score, seq = expected[i]
    np.testing.assert_allclose(out.scores[0, i], score, rtol=1e-5)
    assert list(out.ids[0, i, :len(seq)].numpy()) == seq and int(out.lengths[0, i]) == len(seq)
  # A narrow beam scores no better than the exhaustive search.
  narrow = beam_search.BeamSearch(Step, NestedMap(h=tf.zeros([2], tf.int32)), 1, 2, max_len, 0, eos, alpha)
  assert float(narrow.scores[0, 0]) <= expected[0][0] + 1e-5
  # beam_size=1 is greedy: the argmax token each step, stopping at the first </s>.
  seq, h, total = [], 0, 0.0
  while len(seq) < max_len and (not seq or seq[-1] != eos):
    token = int(np.argmax(logp_fn(h)))
    seq, total, h = seq + [token], total + logp_fn(h)[token], (h * 7 + token + 1) % 101
  greedy = beam_search.BeamSearch(Step, NestedMap(h=tf.zeros([1], tf.int32)), 1, 1, max_len, 0, eos, alpha)
  assert list(greedy.ids[0, 0, :len(seq)].numpy()) == seq and int(greedy.lengths[0, 0]) == len(seq)
  np.testing.assert_allclose(greedy.scores[0, 0], total / ((5.0 + len(seq)) / 6.0) ** alpha, rtol=1e-5)


def test_beam_search_errors():
  with pytest.raises(errors.ConfigError, match='beam_size >= 1'):
    beam_search.BeamSearch(None, NestedMap(), 1, 0, 4, 0, 2)


@pytest.mark.parametrize('name,paper', [('T6_8192_16', 400e6), ('T24_8192_16', 1.3e9), ('T12_16384_32', 1.3e9),
                                        ('T32_16384_32', 3e9), ('T64_16384_32', 6e9)])
def test_paper_sizes_build_without_weights_and_match_the_paper_counts(name, paper):
  p = model_registry.GetParams('mt.gpipe_paper.' + name, 'Train')
  with base_layer.AbstractVariables():
    task = p.task.Instantiate()
  count = base_layer.NumParams(task)
  assert abs(count - paper) / paper < 0.10, (name, count)
  assert not task.trainable_variables  # Nothing was allocated.


def test_errors():
  with pytest.raises(errors.ConfigError, match='vocab_path'):
    model.TransformerMT.Params().Set(name='mt').Instantiate()
  with pytest.raises(errors.DataFileNotFoundError, match='train_spm'):
    model.TransformerMT.Params().Set(name='mt', vocab_path='/nonexistent/spm.model').Instantiate()


def test_decode_lengths_and_beams_are_checked_where_they_are_set():
  """--mode=decode with task.max_decode_len=-5 was a traceback from tf.fill (export said it in one line)."""
  p = model_registry.GetParams('mt.multilingual.TransformerGPipe', 'Test')
  with pytest.raises(errors.ConfigError, match=r'^Param (task\.)?max_decode_len: -5 is not allowed; expected an int '
                     r'>= 3\.$'):
    p.task.max_decode_len = -5
  with pytest.raises(errors.ConfigError, match=r'^Param (task\.)?beam_size: 0 is not allowed; expected an int >= 1\.$'):
    p.task.beam_size = 0
