"""Multilingual NMT on the bundled sample (de, fr, es, ru -> en, deliberately uneven): mt.multilingual.*."""

import os

from lingpipe.core import lr_schedule
from lingpipe.core import optimizer
from lingpipe.model import base_model_params
from lingpipe.model import model_registry
from lingpipe.tasks.mt import input_generator
from lingpipe.tasks.mt import model

SAMPLE_DIR = os.path.join(os.path.dirname(os.path.dirname(input_generator.__file__)), 'mt', 'data', 'nmt_sample')


class MtParams(base_model_params.SingleTaskModelParams):
  """Shared by the MT models: a corpus (DATA_DIR, PATTERN, PAIRS, VOCAB) and a T(L, H, A) size."""

  DATA_DIR = SAMPLE_DIR
  PATTERN = '{split}.{src}-{tgt}.{lang}'
  PAIRS = ['de-en', 'fr-en', 'es-en', 'ru-en']
  VOCAB = 'spm.model'
  TRAIN_SPLIT, DEV_SPLIT, TEST_SPLIT = 'train', 'dev', 'dev'
  TEMPERATURE = 5.0
  BATCH_SIZE = 64
  MAX_LEN = 48
  MODEL_DIM, NUM_LAYERS, HIDDEN_DIM, NUM_HEADS = 128, 2, 512, 4
  NUM_SPLITS, NUM_MICRO_BATCHES = 2, 4
  LEARNING_RATE, WARMUP_STEPS, MAX_STEPS = 2.0, 400, 1000

  def _Input(self, split, train):
    p = input_generator.MultilingualInput.Params().Set(
        file_pattern=os.path.join(self.DATA_DIR, self.PATTERN), split=split, pairs=list(self.PAIRS),
        vocab_path=os.path.join(self.DATA_DIR, self.VOCAB), temperature=self.TEMPERATURE,
        batch_size=self.BATCH_SIZE, max_len=self.MAX_LEN,
        bucket_boundaries=[b for b in (8, 16, 24, 32, 48, 64, 96, 128) if b < self.MAX_LEN] + [self.MAX_LEN])
    if not train:
      p.Set(shuffle=False, repeat=False, drop_remainder=False)
    return p

  def Train(self):
    return self._Input(self.TRAIN_SPLIT, True)

  def Dev(self):
    return self._Input(self.DEV_SPLIT, False)

  def Test(self):
    return self._Input(self.TEST_SPLIT, False)

  def Task(self):
    p = model.TransformerMT.Params().Set(
        name='mt', vocab_path=os.path.join(self.DATA_DIR, self.VOCAB), pairs=list(self.PAIRS),
        model_dim=self.MODEL_DIM, num_layers=self.NUM_LAYERS, hidden_dim=self.HIDDEN_DIM, num_heads=self.NUM_HEADS,
        max_decode_len=self.MAX_LEN)
    shape = [self.BATCH_SIZE, self.MAX_LEN]  # The largest bucket: inspect's estimates, balance='flops'.
    fields = ('src_ids', 'src_paddings', 'tgt_ids', 'tgt_paddings', 'tgt_labels')
    p.network.Set(num_splits=self.NUM_SPLITS, num_micro_batches=self.NUM_MICRO_BATCHES, remat='always',
                   balance='flops', input_shapes={k: shape for k in fields},
                   input_dtypes={'src_ids': 'int32', 'tgt_ids': 'int32', 'tgt_labels': 'int32'})
    p.train.Set(optimizer=optimizer.Adam.Params().Set(beta1=0.9, beta2=0.98, epsilon=1e-9),
                learning_rate=self.LEARNING_RATE,
                lr_schedule=lr_schedule.TransformerSchedule.Params().Set(warmup_steps=self.WARMUP_STEPS,
                                                                         model_dim=self.MODEL_DIM),
                clip_gradient_norm_to_value=1.0, max_steps=self.MAX_STEPS, save_interval_steps=250,
                log_interval_steps=50, summary_interval_steps=10)
    return p


@model_registry.RegisterSingleTaskModel
class TransformerGPipe(MtParams):
  """T(2, 512, 4), model depth 128, 4000-piece shared vocabulary; K=2 cells, M=4 micro-batches, re-materialized.

  Trains on the bundled sample (7,500 sentence pairs) in minutes on a CPU; --mode=decode writes BLEU per pair.
  """
