"""The GPipe paper's multilingual Transformers T(L, H, A), for their sizes: mt.gpipe_paper.*.

L encoder and L decoder layers, feed-forward depth H, A attention heads of depth 64 (attention depth 64 x A);
model depth 1024 and a 64k shared vocabulary with an untied softmax, the assumptions under which the counts match
the paper's (400M, 1.3B deep, 1.3B wide, 3B, 6B) within 10%. They build without allocating weights
(`base_layer.AbstractVariables()`, see tests/test_mt_model.py) and are far too big to train on a CPU; they read
the bundled sample so that their params are complete. They compute in bfloat16 on float32 weights, as the
paper's TPUs do (their matrix units take bfloat16); benchmarks/gpipe_paper/plan_gpipe_paper.py plans the paper's
memory claims in that dtype.
"""

from lingpipe.model import model_registry
from lingpipe.params.mt import multilingual

MODEL_DIM, VOCAB_SIZE, HEAD_DIM = 1024, 64000, 64


class _PaperTransformer(multilingual.MtParams):
  ONE_STEP_TEST = 'skip'
  PAPER_PARAMS = 0  # The paper's parameter count.
  NUM_SPLITS, NUM_MICRO_BATCHES = 8, 32

  def Task(self):
    p = super().Task()
    p.Set(vocab_path='', vocab_size=VOCAB_SIZE, model_dim=MODEL_DIM, attention_dim=HEAD_DIM * self.NUM_HEADS,
          fprop_dtype='bfloat16')
    p.train.lr_schedule.model_dim = MODEL_DIM
    return p


@model_registry.RegisterSingleTaskModel
class T6_8192_16(_PaperTransformer):  # pylint: disable=invalid-name
  """T(6, 8192, 16), the paper's 400M-parameter baseline (Transformer-Big like)."""
  NUM_LAYERS, HIDDEN_DIM, NUM_HEADS, PAPER_PARAMS = 6, 8192, 16, 400e6


@model_registry.RegisterSingleTaskModel
class T24_8192_16(_PaperTransformer):  # pylint: disable=invalid-name
  """T(24, 8192, 16), 1.3B deep."""
  NUM_LAYERS, HIDDEN_DIM, NUM_HEADS, PAPER_PARAMS = 24, 8192, 16, 1.3e9


@model_registry.RegisterSingleTaskModel
class T12_16384_32(_PaperTransformer):  # pylint: disable=invalid-name
  """T(12, 16384, 32), 1.3B wide."""
  NUM_LAYERS, HIDDEN_DIM, NUM_HEADS, PAPER_PARAMS = 12, 16384, 32, 1.3e9


@model_registry.RegisterSingleTaskModel
class T32_16384_32(_PaperTransformer):  # pylint: disable=invalid-name
  """T(32, 16384, 32), 3B."""
  NUM_LAYERS, HIDDEN_DIM, NUM_HEADS, PAPER_PARAMS = 32, 16384, 32, 3e9


@model_registry.RegisterSingleTaskModel
class T64_16384_32(_PaperTransformer):  # pylint: disable=invalid-name
  """T(64, 16384, 32), 6B."""
  NUM_LAYERS, HIDDEN_DIM, NUM_HEADS, PAPER_PARAMS = 64, 16384, 32, 6e9
