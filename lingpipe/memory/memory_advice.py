"""What the planner says fits a process's budget, said when a process ran out of memory (train_loop.py)."""

from lingpipe.core import errors
from lingpipe.gpipe.choice import planning_view
from lingpipe.gpipe.planner import memory_plan
from lingpipe.gpipe.planner import ranking
from lingpipe.memory import process_model


def Advice(p, budget, num_devices, remote):
  """What the planner says fits `budget` bytes a process for model params `p`: one sentence naming the override
  (or how many devices would fit), or '' where this machine has no calibration or the model no pipeline. Said when
  a process runs out of memory, so never the configuration that runs (p's), and where the planner said that one
  fits, with every prediction raised by as much as it was short at least (budget / its predicted peak)."""
  calibration = process_model.Load(('workers',) if remote else ('trainer',))
  if calibration is None or not budget:
    return ''
  try:
    view = planning_view.Of(p)
  except errors.ConfigError:  # No pipeline, or one without input_shapes: nothing to plan.
    return ''
  q = view.params
  running = memory_plan.Candidate(q.schedule, q.remat, num_devices, q.num_micro_batches, (), (), 0.0, 0.0,
                                  q.virtual_stages).Override()

  def Best(devices, workers, scale=1.0):
    candidates = view.Candidates(devices, balance=q.balance if not q.cell_tpl else 'uniform')
    model = calibration.worker if workers else calibration.trainer
    peak_of = lambda c: scale * max(memory_plan.ProcessPeaks(c, model, one_process=not workers))
    ran = [c for c in candidates if c.Override() == running and c.num_splits == devices]
    others = [c for c in candidates if c.Override() != running]
    return ranking.Recommend(others, budget, peak_of), peak_of, peak_of(ran[0]) if ran else None

  _, _, predicted = Best(num_devices, remote)
  # It ran out of memory where it was predicted to fit: the planner was short by budget / predicted at least.
  scale = budget / predicted if predicted and predicted <= budget else 1.0
  raised = ' (the planner\'s peaks raised %.0f%%: it said %s fits, at %.0f MiB)' % (
      100 * (scale - 1), running, predicted / 2**20) if scale > 1 else ''
  best, peak_of, _ = Best(num_devices, remote, scale)
  if best is not None:
    return ('The planner says this fits %.0f MiB a process: --model_params_override="%s" (predicted peak %.0f MiB)%s.'
            % (budget / 2**20, best.Override(), peak_of(best) / 2**20, raised))
  for devices in range(num_devices + 1, 9 if calibration.worker is not None else 0):
    if devices > len(view.layers):
      break
    best, peak_of, _ = Best(devices, True, scale)
    if best is not None and remote:
      return ('The planner says %d workers of %.0f MiB fit it: --model_params_override="%s" (predicted peak %.0f '
              'MiB each)%s.' % (devices, budget / 2**20, best.Override(), peak_of(best) / 2**20, raised))
    if best is not None:
      return ('The planner says nothing fits %.0f MiB in one process; %d lingpipe-workers of that size would '
              '(tools/launch_local.py --workers=%d --worker_memory=%dMiB -- ... --model_params_override="%s")%s.' % (
                  budget / 2**20, devices, devices, budget // 2**20, best.Override(), raised))
  return 'The planner says nothing fits %.0f MiB a process with up to 8 workers%s.' % (budget / 2**20, raised)
