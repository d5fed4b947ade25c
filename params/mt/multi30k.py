"""Multi30k (Elliott et al. 2016): de, fr, cs -> en with one multilingual model: mt.multi30k.*.

The data is not in the repository. Put the Multi30k task-1 text files (train.de, train.en, ..., val.*,
test_2016_flickr.*, unzipped from data/task1/raw of https://github.com/multi30k/dataset) in data/multi30k, or point
LINGPIPE_MULTI30K_DIR at them, and train the shared vocabulary once:

    python tools/train_spm.py --pattern='data/multi30k/{split}.{lang}' --pairs=de-en,fr-en,cs-en \
        --vocab_size=8000 --out=data/multi30k/spm
"""

import os

from lingpipe.model import model_registry
from lingpipe.params.mt import multilingual


@model_registry.RegisterSingleTaskModel
class TransformerGPipe(multilingual.MtParams):
  """T(3, 1024, 4), model depth 256, 8000-piece vocabulary; K=2 cells, M=4 micro-batches; de, fr, cs -> en.

  Dev is val (1,014 lines a pair), Test is test_2016_flickr (1,000).
  """

  ONE_STEP_TEST = 'skip'
  ONE_STEP_SKIP_REASON = 'needs the Multi30k files, which are not in the repository'
  DATA_DIR = os.environ.get('LINGPIPE_MULTI30K_DIR', os.path.join('data', 'multi30k'))
  PATTERN = '{split}.{lang}'
  PAIRS = ['de-en', 'fr-en', 'cs-en']
  TRAIN_SPLIT, DEV_SPLIT, TEST_SPLIT = 'train', 'val', 'test_2016_flickr'
  TEMPERATURE = 1.0  # The three pairs are the same size.
  BATCH_SIZE = 128
  MAX_LEN = 64
  MODEL_DIM, NUM_LAYERS, HIDDEN_DIM, NUM_HEADS = 256, 3, 1024, 4
  LEARNING_RATE, WARMUP_STEPS, MAX_STEPS = 2.0, 800, 8000

  def Task(self):
    p = super().Task()
    p.train.save_interval_steps = 500
    p.train.log_interval_steps = 100
    return p
