"""TransformerMT: a multilingual encoder-decoder Transformer T(L, H, A) under a PipeliningLayer.

Training runs the flat layer sequence of tasks/mt/layers.py through `task.network` (K cells, M micro-batches,
re-materialization); decoding and export run the same layers one after another with cached keys and values
(beam search, tasks/mt/beam_search.py). The GPipe paper's stabilizers are params: `scaled_init` (residual output
projections initialized 1/sqrt(2L) smaller) and `softmax.logits_abs_max` (logit clipping).
"""

import math

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import param_checks
from lingpipe.core import serving
from lingpipe.core.nested_map import NestedMap
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import dropout
from lingpipe.layers import softmax
from lingpipe.layers import transformer
from lingpipe.model import base_task
from lingpipe.tasks.mt import beam_search
from lingpipe.tasks.mt import corpus
from lingpipe.tasks.mt import layers as mt_layers
from lingpipe.tasks.mt import metrics
from lingpipe.tasks.mt import vocab as vocab_lib


class TransformerMT(base_task.BaseTask):
  """See the module docstring. Batches come from tasks/mt/input_generator.MultilingualInput."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('vocab_path', '', 'Shared sentencepiece model (tools/train_spm.py); also sets vocab_size.')
    p.Define('vocab_size', 0, 'Vocabulary size when there is no vocab_path (e.g. to count parameters).')
    p.Define('pairs', [], 'The language pairs of the input, in its order (names the mix_<src>_<tgt> metrics).')
    p.Define('model_dim', 256, 'Model depth D.')
    p.Define('num_layers', 3, 'L: encoder layers, and as many decoder layers.')
    p.Define('hidden_dim', 1024, 'H: feed-forward hidden depth.')
    p.Define('num_heads', 4, 'A: attention heads.')
    p.Define('attention_dim', 0, 'Attention depth (A x per-head depth); 0 means model_dim.')
    p.Define('dropout_prob', 0.1, 'Dropout on embeddings and residual branches (deterministic, so re-computed '
             'cells draw the same masks).')
    p.Define('scaled_init', True, 'Scale the residual output projections\' initializer by 1/sqrt(2L).')
    p.Define('softmax', softmax.SoftmaxLayer.Params().Set(label_smoothing=0.1, logits_abs_max=20.0),
             'Output softmax: label smoothing and logit clipping.')
    p.Define('network', pipelining_layer.PipeliningLayer.Params().Set(num_splits=2, num_micro_batches=4),
             'The pipeline: PipeliningLayer Params (num_splits, num_micro_batches, remat, balance, schedule); '
             'its layers are set from the T(L, H, A) params above. Every task names its pipeline `network`.')
    p.Define('beam_size', 4, 'Beam size of decoding (1: greedy).', check=param_checks.Int(1))
    p.Define('length_alpha', 0.6, 'Length normalization ((5 + length) / 6)^alpha of beam scores.')
    p.Define('max_decode_len', 64, 'Most target tokens a decode produces (an export\'s sources take this many less '
             'the language tag and </s>).', check=param_checks.Int(3))
    return p

  def __init__(self, params):
    super().__init__(params)
    p = self.params
    vocab = vocab_lib.Vocabulary(p.vocab_path) if p.vocab_path else None
    vocab_size = vocab.size if vocab else p.vocab_size
    if vocab_size <= 3:
      raise errors.ConfigError('Task %s: set vocab_path (a sentencepiece model) or vocab_size.' % self.path)
    if vocab and p.vocab_size and p.vocab_size != vocab.size:
      raise errors.ConfigError('Task %s: vocab_size %d does not match %s (%d pieces); leave vocab_size at 0.' % (
          self.path, p.vocab_size, p.vocab_path, vocab.size))
    if p.num_layers < 1:
      raise errors.ConfigError('Task %s: num_layers must be >= 1, got %d.' % (self.path, p.num_layers))
    object.__setattr__(self, 'vocab', vocab)
    object.__setattr__(self, 'vocab_size', vocab_size)
    pipeline = p.network.Copy().Set(name='network', layers=self.LayerParams(p, vocab_size), cell_tpl=[])
    self.CreateChild('network', pipeline)

  @staticmethod
  def LayerParams(p, vocab_size):
    """The flat layer list: embedding, L encoder layers, bridge, L decoder layers, softmax."""
    drop = dropout.DropoutLayer.Params().Set(keep_prob=1.0 - p.dropout_prob, deterministic=True)
    block = transformer.TransformerLayer.Params().Set(
        model_dim=p.model_dim, hidden_dim=p.hidden_dim, num_heads=p.num_heads, attention_dim=p.attention_dim,
        residual_dropout=drop.Copy(), output_init_scale=1.0 / math.sqrt(2 * p.num_layers) if p.scaled_init else 1.0)
    decoder = transformer.TransformerDecoderLayer.Params()
    decoder.Set(**{k: v for k, v in block.IterParams() if k not in ('cls', 'name', 'causal')})
    return ([mt_layers.MtEmbeddingLayer.Params().Set(vocab_size=vocab_size, model_dim=p.model_dim,
                                                     dropout=drop.Copy())] +
            [block.Copy() for _ in range(p.num_layers)] +
            [mt_layers.EncoderToDecoderLayer.Params().Set(model_dim=p.model_dim)] +
            [decoder.Copy() for _ in range(p.num_layers)] +
            [mt_layers.MtSoftmaxLayer.Params().Set(model_dim=p.model_dim, vocab_size=vocab_size,
                                                   softmax=p.softmax.Copy())])

  def AssetFiles(self):
    return [self.vocab.path] if self.vocab else []

  # -- the parts, by role --------------------------------------------------------------------------------------
  @property
  def embedding(self):
    return self.network.units[0]

  @property
  def encoder_layers(self):
    return self.network.units[1:1 + self.params.num_layers]

  @property
  def bridge(self):
    return self.network.units[1 + self.params.num_layers]

  @property
  def decoder_layers(self):
    return self.network.units[2 + self.params.num_layers:-1]

  @property
  def output_softmax(self):
    return self.network.units[-1]

  # -- training ------------------------------------------------------------------------------------------------
  def ComputePredictions(self, batch):
    return self.network.FProp(self.PipelineInputs(batch))

  def PipelineInputs(self, batch):
    return NestedMap(src_ids=batch.src_ids, src_paddings=batch.src_paddings, tgt_ids=batch.tgt_ids,
                     tgt_paddings=batch.tgt_paddings, tgt_labels=batch.tgt_labels)

  def PredictionsFromPipeline(self, outputs, batch):
    del batch  # Unused: the pipeline's last cell computes the per-token losses.
    return outputs

  def ComputeLoss(self, batch, predictions):
    weights = 1.0 - tf.cast(batch.tgt_paddings, predictions.xent.dtype)
    tokens = tf.reduce_sum(weights)
    loss = tf.reduce_sum(predictions.xent * weights) / tf.maximum(tokens, 1.0)
    accuracy = tf.reduce_sum(predictions.correct * weights) / tf.maximum(tokens, 1.0)
    metrics = {'loss': (loss, tokens), 'accuracy': (accuracy, tokens)}
    sentences = tf.cast(tf.shape(batch.tgt_ids)[0], tf.float32)
    for i, pair in enumerate(self.params.pairs):  # The realized language mix of the batch.
      share = tf.reduce_mean(tf.cast(tf.equal(batch.pair, i), tf.float32))
      metrics['mix_%s' % pair.replace('-', '_')] = (share, sentences)
    return loss, metrics

  # -- decoding ------------------------------------------------------------------------------------------------
  def Encode(self, src_ids, src_paddings):
    """The encoder's output [B, S, D] (no pipeline)."""
    state = NestedMap(x=self.embedding.EmbedSequence(src_ids, src_paddings), paddings=src_paddings)
    for layer in self.encoder_layers:
      state = layer.FProp(state)
    return self.bridge.Encoded(state.x, src_paddings)

  def BeamDecode(self, src_ids, src_paddings, beam_size=None, max_len=None):
    """NestedMap(ids [B, K, max_len], scores [B, K], lengths [B, K]): the beam's hypotheses, best first."""
    p = self.params
    beam_size, max_len = beam_size or p.beam_size, max_len or p.max_decode_len
    with context.Training(False):
      src_paddings = tf.cast(src_paddings, p.dtype)
      encoded = self.Encode(src_ids, src_paddings)
      encoded = beam_search.TileBeams(encoded, beam_size)
      paddings = beam_search.TileBeams(src_paddings, beam_size)
      state = [layer.InitState(encoded, paddings, max_len) for layer in self.decoder_layers]

      def Step(ids, t, state):
        x = self.embedding.EmbedStep(ids, t)
        new_state = []
        for layer, layer_state in zip(self.decoder_layers, state):
          x, layer_state = layer.ExtendStep(x, layer_state, t)
          new_state.append(layer_state)
        return tf.nn.log_softmax(self.output_softmax.Logits(x)[:, 0]), new_state

      return beam_search.BeamSearch(Step, state, tf.shape(src_ids)[0], beam_size, max_len, vocab_lib.BOS_ID,
                                    vocab_lib.EOS_ID, p.length_alpha)

  def Decode(self, batch):
    """The best hypothesis [B, max_decode_len] of each example, with the batch's pair and index."""
    out = self.BeamDecode(batch.src_ids, batch.src_paddings)
    return NestedMap(ids=out.ids[:, 0], score=out.scores[:, 0], pair=batch.pair, index=batch.index)

  @classmethod
  def CheckDecodeInput(cls, task_params, input_params):
    """Refuses to decode into a target language that no pair of task.pairs trained (BLEU 0 says nothing)."""
    languages = tuple(corpus.LANGUAGES) + tuple(input_params.extra_languages)
    trained = {corpus.ParsePair(pair, languages)[1] for pair in task_params.pairs}
    untrained = [pair for pair in input_params.pairs if corpus.ParsePair(pair, languages)[1] not in trained]
    if trained and untrained:
      raise errors.ConfigError('input.pairs %s: this model was trained to translate into %s only (task.pairs %s), '
                               'not into %s; decode pairs into %s.' % (
                                   ', '.join(untrained), ', '.join(sorted(trained)), ', '.join(task_params.pairs),
                                   ', '.join(sorted({corpus.ParsePair(p, languages)[1] for p in untrained})),
                                   ' or '.join(sorted(trained))))

  def PostProcessDecode(self, decoded, input_generator):
    """Hypotheses per pair (in file order) and BLEU against the reference files of `input_generator`.

    `decoded` is the list of Decode() outputs (as NumPy) over the whole input. Returns (metrics, {file name:
    text}): bleu_<pair> and bleu_macro, and per pair the hypotheses file <pair>.hyp (the decode's folder names the
    dataset).
    """
    inp = input_generator.params
    pairs = list(inp.pairs)
    rows = {pair: {} for pair in pairs}
    for out in decoded:
      for ids, pair, index in zip(out['ids'], out['pair'], out['index']):
        rows[pairs[int(pair)]][int(index)] = self.vocab.Decode(ids)
    hypotheses, references = {}, {}
    for pair in pairs:
      _, refs = corpus.ReadPair(inp.file_pattern, inp.split, pair, input_generator.languages)
      hypotheses[pair] = [rows[pair].get(i, '') for i in range(len(refs))]
      references[pair] = refs
    scores, signature = metrics.PairBleu(hypotheses, references)
    files = {'%s.hyp' % pair: '\n'.join(h) + '\n' for pair, h in hypotheses.items()}
    return dict(scores, num_sentences=sum(len(h) for h in hypotheses.values())), files, signature

  # -- export --------------------------------------------------------------------------------------------------
  def InferenceResources(self):
    """The tokenizer (its tables and model file) and the target-language table."""
    if self.vocab is None:
      raise errors.ConfigError('Task %s has no vocab_path; export needs the sentencepiece model.' % self.path)
    if not hasattr(self, '_tokenizer'):
      tokenizer = vocab_lib.GraphTokenizer(self.vocab)
      langs = self.ServedTargetLanguages()
      lang_table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
          tf.constant(list(langs)), tf.constant(list(langs.values()), tf.int32)), -1)
      object.__setattr__(self, '_tokenizer', tokenizer)
      object.__setattr__(self, '_lang_table', lang_table)
    return [self._tokenizer, self._lang_table]

  def ServedTargetLanguages(self):
    """{language: id of its <2xx> token} for the targets of task.pairs (all of the vocabulary's if none are
    given): a model trained into English only is not asked for German."""
    langs = self.vocab.TargetLanguages()
    targets = {pair.split('-')[1] for pair in self.params.pairs}
    return {lang: i for lang, i in langs.items() if not targets or lang in targets}

  def Inference(self):
    self.InferenceResources()
    # target_language: one per source (the REST API's row format, "instances", sends a batch of each input), or
    # one for all. Its shape is checked here, so the signature declares none.
    spec = NestedMap(sources=tf.TensorSpec([None], tf.string, name='sources'),
                     target_language=tf.TensorSpec(None, tf.string, name='target_language'))
    served = ', '.join(sorted(self.ServedTargetLanguages()))

    def Translate(sources, target_language):
      batch = tf.shape(sources)[:1]
      shape = tf.shape(target_language)
      one_per_source = tf.logical_and(tf.equal(tf.size(shape), 1), tf.reduce_all(tf.equal(shape, batch)))
      shape_ok = tf.logical_or(tf.equal(tf.size(shape), 0), one_per_source)
      shape_check = serving.Require(shape_ok, 'Input `target_language` must be one language or one per source, '
                                    'shape [] or [batch]; got shape', shape, 'for sources of shape', batch)
      target_language = serving.After([shape_check], target_language)
      lang_id = tf.broadcast_to(self._lang_table.lookup(target_language), batch)
      unknown = tf.boolean_mask(tf.broadcast_to(target_language, batch), lang_id < 0)
      empty = tf.where(tf.equal(tf.strings.length(tf.strings.strip(sources)), 0))[:, 0]
      checks = [serving.Require(tf.equal(tf.size(unknown), 0), 'Input `target_language` must be one of the languages '
                                'this model translates into (%s); got' % served, unknown),
                serving.Require(tf.equal(tf.size(empty), 0), 'Input `sources` must hold non-empty sentences; '
                                'these indices are empty:', empty)]
      sources, lang_id = serving.After(checks, sources, lang_id)
      max_source = self.params.max_decode_len - 2  # With the <2xx> and </s> tokens: max_decode_len.
      tokens = self._tokenizer.Encode(sources)
      source_cut = tokens.row_lengths() > max_source
      tokens = tokens[:, :max_source]
      n = tokens.nrows()
      src = tf.concat([tf.expand_dims(lang_id, 1), tokens, tf.fill([n, 1], vocab_lib.EOS_ID)], 1).to_tensor()
      out = self.BeamDecode(src, tf.cast(tf.equal(src, vocab_lib.PAD_ID), tf.float32))
      ended = tf.reduce_any(tf.equal(out.ids[:, 0], vocab_lib.EOS_ID), axis=1)
      # truncated: the source was cut to max_decode_len - 2 tokens, or the translation reached max_decode_len
      # tokens without ending; a client can split such sentences or export with a larger task.max_decode_len.
      return {'translations': self._tokenizer.Decode(out.ids[:, 0]), 'scores': out.scores[:, 0],
              'truncated': tf.logical_or(source_cut, tf.logical_not(ended))}

    return {'serving_default': (Translate, spec)}
