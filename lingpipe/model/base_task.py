"""BaseTask: the root layer of a model; turns a NestedMap batch into a loss, metrics and gradient updates.

A task subclass builds its network in `__init__` (through `CreateChild`) and implements:
  - `ComputePredictions(batch)` -> NestedMap, the forward pass;
  - `ComputeLoss(batch, predictions)` -> (loss, metrics), metrics a dict name -> (value, weight);
  - `Inference()` -> {signature name: (function, input TensorSpecs NestedMap)} for export.
Training settings (optimizer, learning rate and its schedule, clipping, L2, checkpointing) live in
`task.train` so they have a text form and can be overridden from the command line.
"""

import tensorflow as tf

from lingpipe.core import base_layer
from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.core import loss_scale as loss_scale_lib
from lingpipe.core import lr_schedule
from lingpipe.core import optimizer
from lingpipe.core import param_checks
from lingpipe.core.nested_map import NestedMap
from lingpipe.distributed import cluster
from lingpipe.distributed import mirrors
from lingpipe.distributed import replicas


def TrainParams():
  """Params of the training loop and update rule (task.train)."""
  p = hyperparams.Params()
  p.Define('optimizer', optimizer.Adam.Params(), 'Optimizer Params (optimizer.SGD/Adam/RMSProp).')
  p.Define('learning_rate', 1e-3, 'Base learning rate; the schedule multiplies it.',
           check=param_checks.Positive())
  p.Define('lr_schedule', lr_schedule.Constant.Params(), 'Learning-rate schedule Params.')
  p.Define('clip_gradient_norm_to_value', 0.0, 'Clip gradients to this global norm; 0 disables.',
           check=param_checks.Float(0))
  p.Define('l2_regularizer_weight', 0.0, 'Weight of the L2 penalty on weights of rank >= 2 (not biases or '
           'normalization parameters).', check=param_checks.Float(0))
  p.Define('init_from_checkpoint', '', 'Fine-tuning: a checkpoint (<logdir>/train/ckpt-N of another run) whose '
           'variables initialize a fresh run by name (see lingpipe/runners/init_from_checkpoint.py); not used when '
           'the run resumes from its own checkpoint.', check=param_checks.Str())
  p.Define('init_from_checkpoint_rules', [], 'List of [regex, replacement] rewriting our variable names (relative '
           'to the task, e.g. network/sub_0/w) into the source\'s; the first match applies.',
           check=param_checks.RegexRewrites())
  p.Define('init_from_checkpoint_exclude', [], 'Regexes of variables (relative names) that keep their fresh '
           'initialization, e.g. [\'softmax\'] for a new head.', check=param_checks.Regexes())
  p.Define('max_steps', 1000, 'Stop training at this global step.', check=param_checks.Int(0))
  p.Define('save_interval_steps', 100, 'Write a checkpoint every this many steps (and at the end).',
           check=param_checks.Int(1))
  p.Define('checkpoints_to_keep', 5, 'How many recent checkpoints to keep.', check=param_checks.Int(1))
  p.Define('summary_interval_steps', 10, 'Write TensorBoard summaries every this many steps.',
           check=param_checks.Int(1))
  p.Define('log_interval_steps', 10, 'Print a progress line every this many steps.', check=param_checks.Int(1))
  p.Define('loss_scaling', loss_scale_lib.Params(), 'Dynamic loss scaling, for float16 computation '
           '(lingpipe/core/loss_scale.py).')
  return p


def EvalParams():
  """Params of evaluation (task.eval)."""
  p = hyperparams.Params()
  p.Define('max_batches', 0, 'Evaluate at most this many batches; 0 means the whole (finite) eval set.',
           check=param_checks.Int(0))
  return p


class BaseTask(base_layer.BaseLayer):
  """See the module docstring."""

  @classmethod
  def Params(cls):
    p = super().Params()
    p.name = 'task'
    p.Define('train', TrainParams(), 'Training settings.')
    p.Define('eval', EvalParams(), 'Evaluation settings.')
    return p

  # -- to implement --------------------------------------------------------------------------------------------
  def ComputePredictions(self, batch):
    raise NotImplementedError('%s does not implement ComputePredictions.' % type(self).__name__)

  def ComputeLoss(self, batch, predictions):
    raise NotImplementedError('%s does not implement ComputeLoss.' % type(self).__name__)

  @classmethod
  def CheckDecodeInput(cls, task_params, input_params):
    """Raises ConfigError if a task of `task_params` cannot decode the data of `input_params` (--mode=decode asks
    before it builds the model)."""
    del task_params, input_params

  def Inference(self):
    raise NotImplementedError('%s does not implement Inference.' % type(self).__name__)

  def InferenceResources(self):
    """Objects the Inference() signatures use besides the task's variables (e.g. a tokenizer's tables); the
    exporter keeps them in the SavedModel."""
    return []

  def AssetFiles(self):
    """Files the checkpoints need to be used (e.g. a vocabulary); training copies them beside the checkpoints."""
    return []

  # -- provided ------------------------------------------------------------------------------------------------
  def FProp(self, batch):
    """(loss, metrics) for a batch, in whatever mode the context says. In training, a `network` pipeline trains
    through its FPropWithLoss, every schedule's training call, with the task's loss as a function of the
    pipeline's outputs and the batch (a micro-batch of it where the schedule computes the loss per micro-batch)."""
    network = getattr(self, 'network', None)
    if context.IsTraining() and hasattr(network, 'FPropWithLoss') and (
        type(self).PipelineInputs is not BaseTask.PipelineInputs or network.NeedsLoss()):
      return network.FPropWithLoss(self.PipelineInputs(batch), batch, lambda outputs, part: self.ComputeLoss(
          part, self.PredictionsFromPipeline(outputs, part)))
    return self.ComputeLoss(batch, self.ComputePredictions(batch))

  def PipelineInputs(self, batch):
    """What the task feeds its `network` pipeline (for schedules that compute the loss inside it)."""
    raise errors.ConfigError(
        'Task %s (%s) cannot train a pipeline whose schedule computes the loss inside it (%s): it does not say what '
        'its network takes (PipelineInputs) and how its outputs become predictions (PredictionsFromPipeline). Use '
        'schedule=\'gpipe\'.' % (self.path, type(self).__name__, self.network.params.schedule))

  def PredictionsFromPipeline(self, outputs, batch):
    """ComputeLoss's predictions from the pipeline's outputs on `batch` (a micro-batch of it)."""
    raise NotImplementedError('%s defines PipelineInputs but not PredictionsFromPipeline.' % type(self).__name__)

  def ComputeMetrics(self, batch):
    """Evaluation metrics {name: (value, weight)} of one batch (evaluation mode)."""
    with context.Training(False):
      _, metrics = self.FProp(batch)
    return metrics

  def CreateOptimizer(self):
    """The optimizer of task.train, with slots built for this task's trainable variables."""
    return self.params.train.optimizer.Instantiate().Build(self.trainable_variables)

  def CreateLossScale(self):
    """A loss_scale.DynamicLossScale when task.train.loss_scaling asks for one (by default: when a layer computes
    in float16), else None."""
    p = self.params.train.loss_scaling
    return loss_scale_lib.DynamicLossScale(p) if loss_scale_lib.Wanted(p, self) else None

  def CreateLearningRateSchedule(self):
    return self.params.train.lr_schedule.Instantiate()

  def L2Penalty(self):
    weights = [v for v in self.trainable_variables if v.shape.rank is not None and v.shape.rank >= 2]
    if not weights:
      return tf.constant(0.0)
    return tf.add_n([tf.reduce_sum(tf.square(v)) for v in weights])

  def ComputeGradients(self, batch, loss_scale=None):
    """(loss, metrics, grads) of one training batch; a PipeliningLayer inside runs its own backward. With
    `loss_scale` (a scalar), the gradients are those of the loss times it (loss_scale.py divides them back).

    Batch norm moves its averages once per step, by the moments of all parts (micro-batches, replicas) merged
    (context.BatchNormStats). With R data-parallel replicas (cluster.num_replicas) the batch is sharded over
    them: replicas.ComputeGradients.
    """
    loss, metrics, per_replica = self.ComputeReplicaGradients(batch, loss_scale)
    return loss, metrics, per_replica[0]

  def ComputeReplicaGradients(self, batch, loss_scale=None):
    """(loss, metrics, [grads]): ComputeGradients, with one list of gradients per replica where the weights are
    mirrored (mirrors.Current(): replica r's are those of its copies, mirrors.Mirrors.variables[r]), else one."""
    variables = self.trainable_variables
    l2_weight = self.params.train.l2_regularizer_weight
    mesh = cluster.Current()
    if mesh.num_replicas == 1:
      moments = context.BatchNormStats()
      with tf.GradientTape() as tape, context.CollectBatchNormStats(moments):
        loss, metrics = self.FProp(batch)
        total = loss + l2_weight * self.L2Penalty() if l2_weight else loss
        if loss_scale is not None:
          total *= tf.cast(loss_scale, total.dtype)
      moments.Update()
      return loss, metrics, [tape.gradient(total, variables)]
    return replicas.ComputeGradients(self, batch, mesh, loss_scale, mirrors.Current())

  @staticmethod
  def _Unscaled(grads, variables, loss_scale, scale):
    """`grads` dense (embedding lookups give IndexedSlices; the optimizers update dense slots) and divided by the
    loss scale, each on its variable's device."""
    out = []
    for g, v in zip(grads, variables):
      with tf.device(v.device):
        g = tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
        out.append(loss_scale.Unscale([g], scale)[0] if loss_scale is not None else g)
    return out

  def TrainStep(self, batch, step, opt, schedule, loss_scale=None):
    """One synchronous update. Skips the update if the loss or gradient is not finite: the caller stops, or with
    `loss_scale` (CreateLossScale) the scale backs off and the caller goes on until too many are skipped.

    Returns NestedMap(loss, grad_norm, learning_rate, is_finite, metrics), and with `loss_scale` loss_scale (the
    step's) and skipped_in_a_row (after it).
    """
    tp = self.params.train
    variables = self.trainable_variables
    scale = loss_scale.scale.read_value() if loss_scale is not None else None
    with context.Training(True), context.StepSeed(step):
      loss, metrics, per_replica = self.ComputeReplicaGradients(batch, scale)
    missing = [v.name for v, g in zip(variables, per_replica[0]) if g is None]
    if missing:
      raise errors.ConfigError('No gradient reaches these trainable variables: %s. Are they used in the '
                               'forward pass?' % ', '.join(missing))
    mirrored = mirrors.Current()
    replica_variables = mirrored.variables if mirrored else [variables]
    optimizers = mirrored.optimizers if mirrored else [opt]
    per_replica = [self._Unscaled(grads, replica_variables[r], loss_scale, scale)
                   for r, grads in enumerate(per_replica)]
    # Replica 0's norm decides clipping and finiteness for all: the replicas' gradients are the same sums.
    grad_norm = tf.linalg.global_norm(per_replica[0])
    if tp.clip_gradient_norm_to_value:
      per_replica = [_Clipped(grads, replica_variables[r], tp.clip_gradient_norm_to_value, grad_norm)
                     for r, grads in enumerate(per_replica)]
    is_finite = tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(grad_norm))
    learning_rate = tp.learning_rate * schedule.Value(step)

    def Apply():
      updates = [optimizers[r].Apply(grads, replica_variables[r], learning_rate)
                 for r, grads in enumerate(per_replica)]
      with tf.control_dependencies(updates):
        return tf.constant(True)

    applied = tf.cond(is_finite, Apply, lambda: tf.constant(False))
    out = NestedMap(loss=loss, grad_norm=grad_norm, learning_rate=learning_rate, is_finite=is_finite,
                    metrics=NestedMap({k: v for k, (v, _) in metrics.items()}))
    if loss_scale is not None:
      with tf.control_dependencies([applied]):
        update = loss_scale.Update(is_finite)
      with tf.control_dependencies([update]):
        out.loss_scale, out.skipped_in_a_row = scale, loss_scale.skipped_in_a_row.read_value()
    return out


def _Clipped(grads, variables, clip_norm, norm):
  """tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)'s gradients, each computed on its variable's device."""
  factor = tf.where(tf.math.is_finite(norm), clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm),
                    tf.constant(float('nan'), norm.dtype))
  out = []
  for g, v in zip(grads, variables):
    with tf.device(v.device):
      out.append(None if g is None else g * tf.cast(factor, g.dtype))
  return out
