"""The training loop: resume, step in a tf.function, log progress, write summaries and checkpoints."""

import contextlib
import os
import shutil
import signal
import sys
import time

import tensorflow as tf

from lingpipe.core import byte_sizes
from lingpipe.core import errors
from lingpipe.distributed import cluster
from lingpipe.memory import memory_advice
from lingpipe.memory import memory_budget
from lingpipe.distributed import mirrors
from lingpipe.distributed import remote
from lingpipe.distributed import watchdog as watchdog_lib
from lingpipe.memory import worker_memory
from lingpipe.runners import batch_function
from lingpipe.runners import divergence
from lingpipe.logdir import checkpointer
from lingpipe.runners import init_from_checkpoint
from lingpipe.runners import interrupt
from lingpipe.logdir import recorded_params
from lingpipe.logdir import safe_write
from lingpipe.logdir import set_aside
from lingpipe.logdir import shared_logdir


def _FormatSeconds(seconds):
  seconds = int(seconds)
  if seconds >= 3600:
    return '%dh%02dm' % (seconds // 3600, seconds % 3600 // 60)
  if seconds >= 60:
    return '%dm%02ds' % (seconds // 60, seconds % 60)
  return '%ds' % seconds


class _NoWatchdog:
  """Local runs have no workers to watch."""

  def Beat(self):
    pass


class TrainLoop:
  """Trains the task of model params `p` in `logdir` until task.train.max_steps."""

  def __init__(self, p, logdir, out=None, termination_grace_s=20.0):
    self.p, self.logdir, self.out = p, logdir, out
    self.termination_grace_s = termination_grace_s
    self.train_dir = os.path.join(logdir, checkpointer.TRAIN_DIR)
    self.cluster = cluster.Current()
    self.manager = None  # Made by Restore(), once the index says what is on disk.
    with self.cluster.Placement(), self._NameDeadWorkers('Building the model on the workers'):
      self.task = p.task.Instantiate()
      self.optimizer = self.task.CreateOptimizer()
      self.loss_scale = self.task.CreateLossScale()
    self.schedule = self.task.CreateLearningRateSchedule()
    self.input = p.input.Instantiate()
    self.iterator = iter(self.input.GetDataset())
    self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name='global_step')
    self.model_state = dict(step=self.global_step, task=self.task, optimizer=self.optimizer)
    if self.loss_scale is not None:  # Only then: the checkpoints of other runs keep their layout.
      self.model_state['loss_scale'] = self.loss_scale
    tracked = dict(self.model_state)
    if p.input.checkpoint_iterator:
      tracked['input'] = self.iterator
    self.checkpoint = tf.train.Checkpoint(**tracked)
    self.resumed_step, self.params_staged = 0, False
    self.mirrors = None  # Replicas' copies of the weights, made equal to the restored ones (_Run).
    self.memory_advice = ''  # What the planner says fits, said when memory runs out.
    self.step_fn = batch_function.BatchFunction(self._Step, self.iterator.element_spec)

  def _Step(self, batch):
    with self.cluster.Placement(), mirrors.Use(self.mirrors):
      out = self.task.TrainStep(batch, self.global_step, self.optimizer, self.schedule, self.loss_scale)
    with tf.control_dependencies([out.loss, out.grad_norm]):
      self.global_step.assign_add(tf.cast(out.is_finite, tf.int64))
    return out

  def _LatestCheckpoint(self):
    """The newest checkpoint, also before Restore() has made the manager."""
    return self.manager.latest_checkpoint if self.manager else checkpointer.LatestCheckpoint(self.train_dir)

  @contextlib.contextmanager
  def _NameDeadWorkers(self, what):
    """On a remote cluster, turns a failed TensorFlow call into a ClusterError naming the workers that are gone."""
    try:
      yield
    except tf.errors.OpError as e:
      if not self.cluster.is_remote:
        raise
      problems = self.cluster.Diagnose()
      if not problems:
        raise
      latest = self._LatestCheckpoint()
      raise errors.ClusterError(self.cluster.FailureMessage(
          problems, '%s failed (%s)' % (what, remote.ErrorSummary(e)),
          ' to resume from %s' % latest if latest else ' (no checkpoint was written yet)')) from e

  @contextlib.contextmanager
  def _NameOutOfMemory(self, what):
    """TensorFlow's ResourceExhausted as one line: where memory ran out, the last checkpoint, what fits."""
    try:
      yield
    except tf.errors.ResourceExhaustedError as e:
      latest = self._LatestCheckpoint()
      raise errors.OutOfMemoryError('%s ran out of memory (%s). %s%s' % (
          what, remote.ErrorSummary(e), 'The last checkpoint, %s, is whole; the same command resumes from it.' % latest
          if latest else 'No checkpoint was written yet.', ' ' + self.memory_advice if self.memory_advice else '')
      ) from e

  def _Skipped(self, step, loss, out):
    """A float16 step with non-finite gradients was skipped and the loss scale halved: one line, or the run stops
    when too many were skipped in a row."""
    skipped, in_a_row = int(self.loss_scale.skipped.numpy()), int(out.skipped_in_a_row.numpy())
    limit = self.p.task.train.loss_scaling.max_skipped_in_a_row
    if in_a_row >= limit:  # The weights of `step` give non-finite gradients at every scale tried.
      raise divergence.Stopped(
          self.train_dir, step, 'Step %d: %d steps in a row had non-finite gradients (loss %s, last loss scale '
          '%g); stopped without applying them.' % (step + 1, in_a_row, loss, float(out.loss_scale.numpy())),
          'lower task.train.learning_rate, set task.train.clip_gradient_norm_to_value, or compute in bfloat16 '
          '(task.fprop_dtype)')
    self.Print('step %d skipped: non-finite gradients at loss scale %g, now %g (%d skipped in all).' % (
        step + 1, float(out.loss_scale.numpy()), float(self.loss_scale.scale.numpy()), skipped))

  def Print(self, line):
    print(line, file=self.out, flush=True)

  def _InputChanges(self):
    """Why the checkpoints' input position cannot be restored ('' if it can): the input params they were trained
    with differ from these (the saved position belongs to another input pipeline), or one side does not save it."""
    if not self.p.input.checkpoint_iterator:
      return 'input.checkpoint_iterator is False'
    recorded = checkpointer.RecordedParamsText(self.logdir)
    if recorded is None:
      return ''
    old, new = ({k: v for k, v in recorded_params.Lines(text).items() if k.startswith('input.')}
                for text in (recorded, self.p.ToText()))
    if old.get('input.checkpoint_iterator') == 'False':
      return 'the checkpoints were saved with input.checkpoint_iterator=False'
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if changed:
      return 'the input params changed (%s)' % ', '.join(
          '%s %s -> %s' % (k, old.get(k, 'unset'), new.get(k, 'unset')) for k in changed[:4])
    return ''

  def _RestoreFrom(self, prefix, input_changes):
    if not input_changes:
      checkpointer.Restore(self.checkpoint, prefix)
    else:  # The model and optimizer exactly; the input keeps its fresh start.
      checkpointer.Restore(tf.train.Checkpoint(**self.model_state), prefix, exact_task=True)

  def Restore(self):
    """Restores the newest complete checkpoint that restores, repairing the logdir first (checkpointer.py): the
    params of a run killed after its save are recorded, a killed save's temporary files removed, a missing or
    unreadable index rebuilt from the disk, and corrupt checkpoints moved to train/corrupt/. Returns the
    checkpoint restored, or None for a fresh start."""
    if self.cluster.is_remote:  # Each worker saves and restores its own variables here.
      shared_logdir.Check(self.cluster, self.train_dir)
    note = checkpointer.RecoverParams(self.logdir)
    if note:
      self.Print(note)
    removed = checkpointer.RemoveTemporaryCheckpoints(self.train_dir)
    if removed:
      self.Print('Removed the temporary files of a save that was stopped: %s.' % ', '.join(
          os.path.join(self.train_dir, name) for name in removed))
    complete, notes = checkpointer.Candidates(self.train_dir)
    input_changes = self._InputChanges() if complete else ''
    restored, corrupt = None, []
    for prefix in complete:
      try:
        self._RestoreFrom(prefix, input_changes)
      except checkpointer.CorruptCheckpointError as e:
        folder = set_aside.Quarantine(prefix)
        self.Print('%s Moved its files to %s.' % (e, folder))
        corrupt.append(prefix)
        continue
      restored = prefix
      break
    if notes or corrupt:
      kept = [p for p in complete[::-1] if p not in corrupt]
      checkpointer.WriteIndex(self.train_dir, kept)
      self.Print('Checkpoints: %s; rebuilt %s from the complete checkpoints on disk: %s.' % (
          '; '.join(notes + ['%s is corrupt' % os.path.basename(p) for p in corrupt]),
          os.path.join(self.train_dir, checkpointer.INDEX_FILE),
          ', '.join(os.path.basename(p) for p in kept) or 'none'))
    if corrupt and restored is None:
      raise errors.CheckpointError(
          'No checkpoint in %s restores: %s moved to %s. Training would start over from step 0; if that is what '
          'you want, move %s aside (or use another --logdir) and rerun.' % (
              self.train_dir, ', '.join(os.path.basename(p) for p in corrupt),
              os.path.join(self.train_dir, set_aside.CORRUPT_DIR), self.train_dir))
    self.manager = tf.train.CheckpointManager(self.checkpoint, self.train_dir,
                                              max_to_keep=self.p.task.train.checkpoints_to_keep,
                                              checkpoint_name='ckpt')
    if restored:
      self.resumed_step = int(self.global_step.numpy())
      self.Print('Resumed from %s at step %d.' % (restored, self.resumed_step))
      if input_changes:
        self.Print('The input starts from its beginning, not from the checkpoint\'s position: %s.' % input_changes)
    return restored

  def _MemoryAdvice(self):
    """Says the workers' budgets, and keeps what the planner says fits the budget (the workers' or this process's),
    to say if memory runs out."""
    if self.cluster.is_remote:
      budgets = self.cluster.WorkerBudgets()
      if budgets:
        self.Print("Workers' memory budgets: %s." % budgets)
    limit = memory_budget.Limit(self.cluster)
    if limit:
      self.memory_advice = memory_advice.Advice(self.p, limit, len(self.cluster.devices[0]), self.cluster.is_remote)
      if self.cluster.is_remote:
        self.cluster.memory_advice = self.memory_advice

  def ResumeHint(self):
    """Where the same command resumes, as the end of a sentence."""
    latest = checkpointer.LatestCheckpoint(self.train_dir)
    if latest:
      return 'the same command resumes from %s (step %d)' % (latest, checkpointer.Step(latest))
    return 'no checkpoint was written yet: the same command starts from step 0'

  def Save(self):
    """Writes a checkpoint; with this run's first one, params.txt and the task's asset files (params.txt changes
    only once the checkpoint is complete: checkpointer.StageParams). Weights that are not finite are not saved."""
    step = int(self.global_step.numpy())
    with self._NameDeadWorkers('Checking the weights before saving'):
      divergence.CheckFinite(self.task.variables, 'The model after step %d' % step, 'not saved; %s, and with a '
                             'lower task.train.learning_rate it trains on.' % self.ResumeHint())
    if not self.params_staged:
      staged = checkpointer.StageParams(self.logdir, self.p, self.resumed_step)
      for path in self.task.AssetFiles():
        safe_write.CopyAtomically(path, os.path.join(self.train_dir, os.path.basename(path)), 'asset')
    try:
      with self._NameDeadWorkers('Saving a checkpoint'):
        saved = self.manager.save(checkpoint_number=self.global_step, options=checkpointer.Options())
    except (tf.errors.OpError, OSError) as e:
      if not safe_write.IsNoSpace(e):
        raise
      prefix = os.path.join(self.train_dir, 'ckpt-%d' % step)
      # This save's partial files. A checkpoint that is complete (the disk filled while the index was updated)
      # stays: the next run adopts it.
      partial = ([prefix + '_temp'] if os.path.isdir(prefix + '_temp') else []) + (
          checkpointer.CheckpointFiles(prefix) if checkpointer.Incomplete(prefix) else [])
      for path in partial:
        if os.path.isdir(path):
          shutil.rmtree(path, ignore_errors=True)
        else:
          os.remove(path)
      latest = checkpointer.LatestCheckpoint(self.train_dir)  # What is on disk, not what the manager believes.
      needed = sum(os.path.getsize(f) for f in checkpointer.CheckpointFiles(latest)) if latest else None
      raise safe_write.DiskFullError(
          'checkpoint', prefix, needed, ' Free space and rerun the same command: it resumes from %s.' % (
              '%s (step %d)' % (latest, checkpointer.Step(latest)) if latest else 'step 0 (no checkpoint yet)')
      ) from e
    if not self.params_staged:
      self.params_staged = True
      note = checkpointer.CommitParams(self.logdir) if staged else None
      if note:
        self.Print(note)
    interrupt.SetUnsaved(False)
    memory_budget.Tell(checkpoint=saved)
    return saved

  def Run(self):
    with interrupt.SavingOnTerminate(self.termination_grace_s, self._TerminationTimedOut,
                                     lambda: 'terminated (SIGTERM); %s.' % self.ResumeHint()):
      if not self.cluster.is_remote:
        return self._Run(_NoWatchdog())
      watchdog = watchdog_lib.Watchdog(self.cluster, self.cluster.timeout_s, lambda: self.manager.latest_checkpoint)
      with watchdog, worker_memory.Monitor(self.cluster) as memory:
        self.cluster.memory = memory
        return self._Run(watchdog)

  def _TerminationTimedOut(self):
    """Called by a timer thread when a SIGTERM's step and save have not ended within the grace period."""
    print('lingpipe-train: terminated (SIGTERM): the step or save in progress did not end within %gs, so no new '
          'checkpoint was written; %s.' % (self.termination_grace_s, self.ResumeHint()), file=sys.stderr, flush=True)
    os._exit(128 + signal.SIGTERM)  # pylint: disable=protected-access

  def _Run(self, watchdog):
    p, tp = self.p, self.p.task.train
    with self._NameDeadWorkers('Restoring the model'):
      if not self.Restore() and tp.init_from_checkpoint:
        self.Print(init_from_checkpoint.InitFromCheckpoint(
            self.task, tp.init_from_checkpoint, [tuple(r) for r in tp.init_from_checkpoint_rules],
            tp.init_from_checkpoint_exclude))
    step = int(self.global_step.numpy())
    self._MemoryAdvice()
    memory_budget.Tell(name='lingpipe-train', checkpoint=self.manager.latest_checkpoint, advice=self.memory_advice)
    if step >= tp.max_steps:  # Nothing is written: params.txt still describes the checkpoints.
      self.Print('Already at step %d >= max_steps %d; nothing to train.' % (step, tp.max_steps))
      return step
    if self.cluster.num_replicas > 1 and p.cluster.gradient_exchange == 'all_reduce':
      self.mirrors = mirrors.Mirrors(self.task.trainable_variables, self.optimizer, self.cluster)
    with self._NameFullDisk():
      writer = tf.summary.create_file_writer(self.train_dir)
    self.Print('Training %s from step %d to %d in %s.' % (p.model, step, tp.max_steps, self.logdir))
    if self.input.Summary():
      self.Print('Input: %s' % self.input.Summary())
    start_time, start_step, last_saved = None, step, step
    batch_size = p.input.batch_size
    while step < tp.max_steps:
      interrupt.Check()  # A Ctrl-C that library code swallowed (interrupt.py) stops here.
      if interrupt.TerminationRequested():
        if step == last_saved:
          raise interrupt.Terminated('terminated (SIGTERM) at step %d; %s.' % (step, self.ResumeHint()))
        raise interrupt.Terminated('terminated (SIGTERM) at step %d: saved %s; the same command resumes from '
                                   'it.' % (step, self.Save()))
      try:
        batch = next(self.iterator)
      except StopIteration:
        self.Print('The training input ran out at step %d (input.repeat is False).' % step)
        break
      with self._NameDeadWorkers('Step %d' % (step + 1)), self._NameOutOfMemory('Step %d' % (step + 1)):
        out = self.step_fn(batch)
        loss, finite = float(out.loss.numpy()), bool(out.is_finite.numpy())
      watchdog.Beat()
      if not finite and self.loss_scale is not None:
        self._Skipped(step, loss, out)
        continue
      if not finite:  # `step` counts the steps applied: this one is step + 1, from the weights of `step`.
        raise divergence.Stopped(self.train_dir, step, 'Step %d: loss %s, gradient norm %s is not finite; stopped '
                                 'without applying it.' % (step + 1, loss, float(out.grad_norm.numpy())))
      step += 1
      interrupt.SetUnsaved(True)
      if start_time is None:  # Measure speed after the first step, which includes tracing.
        start_time, start_step = time.time(), step
      if step % tp.summary_interval_steps == 0 or step == tp.max_steps:
        with self._NameFullDisk(), writer.as_default(step=step):
          tf.summary.scalar('loss', loss)
          tf.summary.scalar('learning_rate', out.learning_rate)
          tf.summary.scalar('grad_norm', out.grad_norm)
          if self.loss_scale is not None:
            tf.summary.scalar('loss_scale', out.loss_scale)
            tf.summary.scalar('skipped_steps', self.loss_scale.skipped)
          for name, value in out.metrics.items():
            tf.summary.scalar('metrics/%s' % name, value)
      if step % tp.log_interval_steps == 0 or step == tp.max_steps:
        elapsed = time.time() - start_time
        rate = (step - start_step) / elapsed if elapsed > 0 and step > start_step else float('nan')
        eta = (tp.max_steps - step) / rate if rate == rate and rate > 0 else 0
        metrics = ' '.join('%s=%.4f' % (k, float(v)) for k, v in sorted(out.metrics.items()) if k != 'loss')
        if self.loss_scale is not None:
          metrics += ' loss_scale=%g skipped=%d' % (float(out.loss_scale), int(self.loss_scale.skipped.numpy()))
        if self.cluster.is_remote and self.cluster.memory and self.cluster.WorkerBudgets():
          metrics += ' workers_peak=[%s]' % self.cluster.memory.Summary()
        self.Print('step %d/%d loss=%.4f %s lr=%.3g steps/s=%.2f examples/s=%.1f eta=%s' % (
            step, tp.max_steps, loss, metrics, float(out.learning_rate), rate, rate * batch_size,
            _FormatSeconds(eta)))
      if step % tp.save_interval_steps == 0:
        self.Print('Saved checkpoint %s' % self.Save())
        last_saved = step
        watchdog.Beat()
    if step != last_saved:
      self.Print('Saved checkpoint %s' % self.Save())
    with self._NameFullDisk():
      writer.flush()
    return step

  @contextlib.contextmanager
  def _NameFullDisk(self):
    """A full disk while TensorFlow writes the training summaries as one line (it raised ResourceExhausted from
    deep in the events writer); an events file it could not begin is removed."""
    before = set(os.listdir(self.train_dir)) if os.path.isdir(self.train_dir) else set()
    try:
      yield
    except (tf.errors.OpError, OSError) as e:
      if not safe_write.IsNoSpace(e):
        raise
      try:
        for name in set(os.listdir(self.train_dir)) - before:
          path = os.path.join(self.train_dir, name)
          if name.startswith('events.') and os.path.getsize(path) == 0:
            os.remove(path)
        free = byte_sizes.Format(shutil.disk_usage(self.train_dir).free)
      except OSError:
        free = 'unknown'
      raise errors.DiskFullError(
          'No space left on device writing the training summaries in %s (%s free on its filesystem). Nothing '
          'was lost; free space and rerun: %s.' % (self.train_dir, free, self.ResumeHint())) from e
