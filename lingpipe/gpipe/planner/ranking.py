"""How every chooser ranks pipeline configurations (--pipeline=auto, --mode=inspect, plan_pipeline.py, the advice at a
memory death): the margin of a budget kept free, what fits, and the fastest predicted, then the least memory."""

# Of a budget, kept free by every chooser: the process predictions of dense stacks were within 4% of measured peaks.
MARGIN = 0.10


def RankKey(speedup, peak):
  """How every chooser ranks configurations: the fastest predicted, then the least memory."""
  return (round(speedup, 3), -peak)


def Fits(peak, budget, margin=MARGIN):
  """Whether a predicted `peak` is within `budget` less the margin every chooser keeps."""
  return peak <= budget * (1 - margin)


def Recommend(candidates, budget, peak_of=None, margin=MARGIN):
  """The one rule of --pipeline=auto's ranking, --mode=inspect, plan_pipeline.py and the advice at a memory death:
  of the candidates whose peak (`peak_of`, default the fullest device's; a process's with memory_plan.ProcessPeaks) fits
  `budget` less the margin (Fitting), the fastest predicted, then the least memory; None if none fits."""
  peak_of = peak_of or (lambda c: c.peak)
  fitting = Fitting(candidates, lambda c: not budget or Fits(peak_of(c), budget, margin))
  if not fitting:
    return None
  return max(fitting, key=lambda c: RankKey(c.speedup, peak_of(c)))


REMATS_BY_WORK = ('never', 'except_last', 'always', 'per_layer')  # least re-computation first


def Fitting(items, fits, candidate_of=lambda item: item):
  """The `items` (candidates, or what `candidate_of` gives a candidate of) that `fits`, in order, less those that
  re-compute more than a twin that fits (the same K, M, schedule and cut): re-materialization buys memory with time,
  so where the twin fits it only costs. Predicted, the two may tie (a plan whose backward follows its forward
  re-computes nothing), and the one re-computing, with the smaller peak, would rank first."""
  fitting = [item for item in items if fits(item)]

  def Twin(item):
    c = candidate_of(item)
    return c.num_splits, c.num_micro_batches, c.schedule, c.virtual_stages, tuple(c.counts)

  def Work(item):
    remat = candidate_of(item).remat
    return REMATS_BY_WORK.index(remat) if remat in REMATS_BY_WORK else len(REMATS_BY_WORK)

  least = {}
  for item in fitting:
    least[Twin(item)] = min(least.get(Twin(item), len(REMATS_BY_WORK)), Work(item))
  return [item for item in fitting if Work(item) <= least[Twin(item)]]
