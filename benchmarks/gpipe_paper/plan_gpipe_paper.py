r"""The memory planner against the GPipe paper's largest Transformers (Huang et al. 2019, Table 1 and section 3).

    python benchmarks/gpipe_paper/plan_gpipe_paper.py
    python benchmarks/gpipe_paper/plan_gpipe_paper.py --kept=fused
    python benchmarks/gpipe_paper/plan_gpipe_paper.py --fprop_dtype=float32 --optimizer_slots=1 --device_memory=16GiB

The paper's set-up: Transformer layers of model depth 2048, feed-forward 8192 and 32 heads, a 32k vocabulary,
sequences of 1024 tokens, batches of 32, 16 GiB per accelerator. Its findings: re-materialization lets one
accelerator train a 2.7x larger model (785.8M parameters, 13 layers, against 282.2M, 3 layers), and 128
partitions a model of 83.9B parameters (1663 layers). For each set-up this tool asks the planner
(lingpipe/gpipe/planner/memory_plan.py) for the most layers whose fullest device fits, over M in --micro_batches:

    without re-materialization, one device   K=1, M=1, remat never (the plain model)
    with re-materialization, one device      K=1, remat always
    128 partitions                           K=128, remat always, schedule gpipe

Assumptions, beyond the planner's own: float32 weights, gradients and slots; layers computing in the registered
paper models' dtype (mt.gpipe_paper's task.fprop_dtype: bfloat16, as on the paper's TPUs; --fprop_dtype to
change it), so activations and hand-offs of 2 bytes, what lingpipe keeps in float32 (normalization statistics,
the softmax's logits) of 4, and a bfloat16 copy of each weight; --optimizer_slots slot variables per weight (2:
Adam); the layers are lingpipe's TransformerLayer (pre-norm, attention then feed-forward), their backward's
internal activations traced as the planner does (--kept=tensorflow: what TensorFlow's executor keeps, which is what
lingpipe runs) or only the inputs of the backward's matrix products (--kept=fused: an estimate of a compiler that
fuses element-wise ops and transposes into their consumers, as XLA did for the paper; 6.5 GiB per layer at
float32 instead of 8.25, see saved_activations.py); the embedding and the softmax
(each 32k x 2048) are counted on the first and the last device, with the softmax's logits and their gradient for
one micro-batch as the last device's extra working set. The paper counts parameters the same way
(layers plus the two tables; 1663 x 50.3M + 2 x 65.5M = 83.9B).
"""

import argparse
import sys


PAPER = {'naive': (3, 282.2e6), 'remat': (13, 785.8e6), 'k128': (1663, 83.9e9)}


def _Args(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--device_memory', default='16GiB', help='Memory of one accelerator.')
  parser.add_argument('--optimizer_slots', type=int, default=2, help='Slot variables per weight (Adam: 2).')
  parser.add_argument('--fprop_dtype', default=None, choices=('float32', 'bfloat16', 'float16'),
                      help='The layers\' compute dtype; default: the registered paper models\' (mt.gpipe_paper).')
  parser.add_argument('--kept', default='tensorflow', choices=('tensorflow', 'fused'),
                      help='Which activations a backward keeps: tensorflow (what lingpipe\'s runtime keeps, traced) '
                      'or fused (what a compiler fusing element-wise ops and transposes keeps, as XLA on the '
                      'paper\'s TPUs: the inputs of the matrix products; saved_activations.py).')
  parser.add_argument('--micro_batches', default='1,2,4,8,16,32', help='Values of M to consider.')
  parser.add_argument('--model_dim', type=int, default=2048)
  parser.add_argument('--hidden_dim', type=int, default=8192)
  parser.add_argument('--heads', type=int, default=32)
  parser.add_argument('--vocab', type=int, default=32000)
  parser.add_argument('--seq_len', type=int, default=1024)
  parser.add_argument('--batch', type=int, default=32)
  return parser.parse_args(argv)


def PaperDtype():
  """The compute dtype the registered paper models declare (mt.gpipe_paper's task.fprop_dtype)."""
  from lingpipe.runners import run_params  # pylint: disable=g-import-not-at-top
  return run_params.BuildModelParams('mt.gpipe_paper.T6_8192_16').task.fprop_dtype


class Model:
  """The paper's Transformer with a number of layers, as the planner sees it."""

  def __init__(self, args):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
    from lingpipe.layers import transformer  # pylint: disable=g-import-not-at-top
    self.args = args
    self.dtype = tf.as_dtype(args.fprop_dtype) if args.fprop_dtype else PaperDtype()
    layer = transformer.TransformerLayer.Params().Set(name='layer', model_dim=args.model_dim,
                                                      hidden_dim=args.hidden_dim, num_heads=args.heads)
    shapes = {'x': [args.batch, args.seq_len, args.model_dim], 'paddings': [args.batch, args.seq_len]}
    # All layers are alike: described once, in the compute dtype.
    self.one = memory_plan.DescribeLayers([layer], shapes, fused=args.kept == 'fused', fprop_dtype=self.dtype)
    self.table = args.vocab * args.model_dim  # Parameters of the embedding, and of the softmax.
    # The softmax's logits for a micro-batch, in float32 whatever the compute dtype (softmax.py), and their gradient.
    self.logit_bytes = 8

  def Layers(self, num_layers):
    from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
    one = self.one
    return memory_plan.Layers(one.params * num_layers, one.flops * num_layers, one.out_bytes * num_layers,
                              one.in_bytes, one.internal_bytes * num_layers, one.compute_size)

  def Params(self, num_layers):
    return num_layers * self.one.params[0] + 2 * self.table

  def Peak(self, num_layers, k, m, remat):
    """Bytes of the fullest device: the planner's cells plus the tables and the logits (the docstring)."""
    from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
    a = self.args
    counts = [num_layers // k + (1 if i < num_layers % k else 0) for i in range(k)]  # Alike layers: even cells.
    cells = memory_plan.CellMemories(self.Layers(num_layers), counts, m, remat, slots=a.optimizer_slots)

    def TableBytes(cell):  # Float32 weights with their compute copy, gradients and slots, as the device's layers.
      return self.table * 4 * (cell.weights + cell.copies + cell.gradients + cell.slots) / cell.weights

    extra = [0] * k
    extra[0] += TableBytes(cells[0])
    extra[-1] += TableBytes(cells[-1]) + (a.batch // m) * a.seq_len * a.vocab * self.logit_bytes
    return max(c.peak + e for c, e in zip(cells, extra))

  def Largest(self, k, remat, micro_batches, memory):
    """(layers, M) of the most layers that fit in `memory` with K=k (at least k layers), or (0, None)."""
    def Fits(n):
      return min((self.Peak(n, k, m, remat), m) for m in micro_batches)
    lo, hi = 0, k
    while Fits(hi)[0] <= memory:
      lo, hi = hi, hi * 2
    while hi - lo > 1:
      mid = (lo + hi) // 2
      lo, hi = (mid, hi) if Fits(mid)[0] <= memory else (lo, mid)
    return (lo, Fits(lo)[1]) if lo >= k else (0, None)


def Run(args, out=None):
  from lingpipe.gpipe.planner import memory_plan  # pylint: disable=g-import-not-at-top
  model = Model(args)
  memory = memory_plan.ParseBytes(args.device_memory)
  micro = [int(m) for m in args.micro_batches.split(',') if m and args.batch % int(m) == 0]
  setups = {'naive': (1, 'never', [1]), 'remat': (1, 'always', micro), 'k128': (128, 'always', micro)}
  print('# Transformer d=%d ff=%d heads=%d, vocab %d, %d x %d tokens, %s devices, %d optimizer slots, float32 '
        'weights, computes in %s; layer: %.1fM parameters, %.0f MiB of internal activations per batch' % (
            args.model_dim, args.hidden_dim, args.heads, args.vocab, args.batch, args.seq_len, args.device_memory,
            args.optimizer_slots, model.dtype.name, model.one.params[0] / 1e6, model.one.internal_bytes[0] / 2**20),
        file=out)
  print('%-34s %7s %4s %14s %14s %8s' % ('set-up', 'layers', 'M', 'parameters', 'paper', 'ratio'), file=out)
  results = {}
  for name, (k, remat, ms) in setups.items():
    layers, m = model.Largest(k, remat, ms, memory)
    params = model.Params(layers) if layers else 0
    results[name] = dict(layers=layers, micro_batches=m, params=params)
    title = {'naive': 'one device, no re-materialization', 'remat': 'one device, re-materialization',
             'k128': '128 partitions, re-materialization'}[name]
    print('%-34s %7d %4s %13.1fM %13.1fM %8.2f' % (title, layers, m, params / 1e6, PAPER[name][1] / 1e6,
                                                  params / PAPER[name][1]), file=out)
  paper_gain = PAPER['remat'][1] / PAPER['naive'][1]
  if results['naive']['params']:
    gain = results['remat']['params'] / results['naive']['params']
    print('re-materialization on one device: %.2fx larger (paper %.2fx; ratio %.2f)' % (
        gain, paper_gain, gain / paper_gain), file=out)
  else:
    gain = None
    print('re-materialization on one device: without it not even one layer fits (paper: %.2fx larger)' % paper_gain,
          file=out)
  print('128 partitions: %.1fB parameters (paper 83.9B; ratio %.2f)' % (
      results['k128']['params'] / 1e9, results['k128']['params'] / PAPER['k128'][1]), file=out)
  results['remat_gain'] = gain
  return results


def main(argv=None):
  args = _Args(argv)
  from lingpipe import binary  # pylint: disable=g-import-not-at-top
  binary.QuietTool()
  return binary.RunUserErrorsAsOneLine('plan_gpipe_paper', lambda: Run(args), verbose=False)


if __name__ == '__main__':
  sys.exit(main())
