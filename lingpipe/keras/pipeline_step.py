"""How lingpipe.keras.Pipeline trains and runs a batch (pipeline.py): Keras's train step through the pipeline's
FPropWithLoss, the forward of a call, data-parallel replicas' shards, and a batch of open size padded to the batch
size. A mixin of Pipeline: it reads the pipeline, the batch size and the seed step the model holds."""

import keras
import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.distributed import replicas
from lingpipe.keras import keras_layer


class TrainStep:
  """Pipeline's train_step and the forward its call() runs (see the module docstring)."""

  def train_step(self, data):
    """Keras's train step, through the pipeline's FPropWithLoss as every schedule trains: the compiled loss and
    metrics run on the last cell, on the whole batch's outputs (GPipe) or per micro-batch where the schedule
    interleaves forwards and backwards (1F1B: a micro-batch's backward starts when its loss is known).

    Per micro-batch, the batch's loss is the mean of the micro-batches' (equal-sized) losses: the whole batch's loss
    for Keras's default reduction, 'sum_over_batch_size', and regularization losses, added to each, count once.
    """
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    x = keras_layer.ToLingpipe(Tensors(self._NamedInputs(x)))
    self._CheckInputShape(x)
    rows = tf.nest.flatten(x)[0].shape[0]
    if rows is None and self.pipeline.num_replicas > 1 and not self.pipeline.NeedsLoss():
      # A batch of open size is padded to the batch size (call()), and the replicas' shards of the pad rows and
      # of the targets would not line up: Keras's step runs the padded call and its loss on the real rows.
      return super().train_step(data)
    if rows is not None and self._batch_size is None:
      self._batch_size = rows
    real_rows = None
    if self.pipeline.NeedsLoss():
      self._CheckPerMicroBatchLoss(rows, y)
    else:
      self.CheckBatch(rows)
      if rows is None:  # As call() does: pad to the batch size, drop the pad rows.
        x, real_rows = self._PadToBatchSize(x, True)
    targets = {}
    if y is not None:
      targets['y'] = Tensors(y)
    if sample_weight is not None:
      targets['sample_weight'] = Tensors(sample_weight)

    def Loss(outputs, part):
      y_pred = keras_layer.ToKeras(outputs)
      if real_rows is not None:
        y_pred = tf.nest.map_structure(lambda t: t[:real_rows], y_pred)
      weight = part.get('sample_weight')
      loss = self.compute_loss(x=None, y=part.get('y'), y_pred=y_pred, sample_weight=weight, training=True)
      self.compute_metrics(None, part.get('y'), y_pred, sample_weight=weight)  # Sums: per micro-batch is exact.
      return loss, {}

    seed_step = self._seed_step.value
    with tf.GradientTape() as tape:
      with context.Training(True), context.StepSeed(tf.convert_to_tensor(seed_step)):
        if self.pipeline.num_replicas == 1:
          loss, _ = self.pipeline.FPropWithLoss(x, targets, Loss)
        else:  # Equal shares: the mean of the replicas' mean losses is the batch's.
          loss = self._OnReplicas(
              (x, targets), True, lambda shard: self.pipeline.FPropWithLoss(shard[0], shard[1], Loss)[0],
              lambda losses: tf.add_n(losses) / len(losses))
      scaled_loss = self.optimizer.scale_loss(loss)
    gradients = tape.gradient(scaled_loss, self.trainable_variables)
    self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
    seed_step.assign_add(1)
    loss_tracker = getattr(self, '_loss_tracker', None)  # Keras's own train_step feeds fit's 'loss' this way.
    if loss_tracker is not None:
      loss_tracker.update_state(loss, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0] if real_rows is None
                                else real_rows)
    return self.get_metrics_result()

  def _CheckPerMicroBatchLoss(self, rows, y):
    """One line for what a schedule that computes the loss per micro-batch cannot train on."""
    schedule = self.pipeline.params.schedule
    if rows is None:
      raise errors.ConfigError(
          'lingpipe.keras.Pipeline %r: schedule %r trains on batches of one static size, and Keras left this '
          'one open (after a smaller last batch). Use a batch size that divides the data, or a dataset batched '
          'with drop_remainder=True.' % (self.name, schedule))
    if y is None:
      raise errors.ConfigError('lingpipe.keras.Pipeline %r: schedule %r computes the compiled loss per '
                               'micro-batch and needs targets: fit(x, y).' % (self.name, schedule))
    losses = self.loss.values() if isinstance(self.loss, dict) else tf.nest.flatten(self.loss)
    summed = [loss for loss in losses if getattr(loss, 'reduction', None) == 'sum']
    if summed:  # The mean of the micro-batches' sums would be 1/M of the batch's sum.
      raise errors.ConfigError(
          "lingpipe.keras.Pipeline %r: schedule %r averages the micro-batches' losses, and %s sums over the batch "
          "(reduction='sum'). Use reduction='sum_over_batch_size' (scale the learning rate by the batch size), "
          "or schedule='gpipe'." % (self.name, schedule, type(summed[0]).__name__))

  def _Forward(self, inputs, seed, training):
    if training and self.pipeline.NeedsLoss():
      raise errors.ConfigError(
          'lingpipe.keras.Pipeline %r: schedule %r computes the loss inside the pipeline, so it trains through '
          "fit() (its train_step); a training call of the model has no loss to run. Call it with training=False, "
          "or use schedule='gpipe' for a custom training loop." % (self.name, self.pipeline.params.schedule))
    with context.Training(training), context.StepSeed(seed if training else None):
      if self.pipeline.num_replicas == 1:
        return self.pipeline.FProp(inputs)
      return self._OnReplicas(inputs, training, lambda shard: self.pipeline.FProp(shard), Concat)

  def _OnReplicas(self, inputs, training, fn, combine):
    """combine([fn(shard) for each replica's shard of `inputs`, run on its devices]); in training, batch norm's
    moving statistics move once, by the moments of every replica's rows (the whole batch's)."""
    num_replicas = self.pipeline.num_replicas
    rows = tf.nest.flatten(inputs)[0].shape[0]
    if rows is not None and rows % num_replicas:
      raise errors.ConfigError(
          'lingpipe.keras.Pipeline %r: a batch of %d rows does not split into num_replicas=%d equal shares. Use a '
          'batch size that is a multiple of %d.' % (self.name, rows, num_replicas, num_replicas))
    shards = replicas.ReplicaShards(inputs, num_replicas)
    moments = context.BatchNormStats(discard=not training)
    results = []
    with context.CollectBatchNormStats(moments):
      for r, shard in enumerate(shards):
        with context.Replica(r), tf.device(self.pipeline.ReplicaDevices(r)[0]):
          results.append(fn(shard))
    moments.Update()
    return combine(results)

  def _UnknownBatchSize(self):
    return errors.ConfigError(
        'lingpipe.keras.Pipeline %r: the batch size is unknown (a dataset batched without drop_remainder?), and '
        'micro-batching needs it. Pass batch_size= to Pipeline, or batch with drop_remainder=True.' % self.name)

  def _RefuseOpenBatch(self, x):
    """A dataset of open batch size with none given is refused before anything runs ('auto' trials included),
    not at its first padded step."""
    if (isinstance(x, tf.data.Dataset) and self._batch_size is None
        and tf.nest.flatten(x.element_spec)[0].shape[:1].as_list() == [None]):
      raise self._UnknownBatchSize()

  def _PadToBatchSize(self, inputs, training):
    """Keras traces its step functions with the batch dimension open once it has seen two batch sizes (the last
    batch of an epoch is often smaller), and from the start for a dataset batched without drop_remainder."""
    size = self._batch_size
    if size is None:
      raise self._UnknownBatchSize()
    if training and self._has_batch_norm:
      raise errors.ConfigError(
          'lingpipe.keras.Pipeline %r: a training batch of open size (Keras does this after a smaller last batch) '
          'would be padded, and BatchNormalization would count the pad rows. Train on batches of one size: a '
          'batch size that divides the data, or a dataset batched with drop_remainder=True.' % self.name)
    real_rows = tf.shape(tf.nest.flatten(inputs)[0])[0]
    check = tf.debugging.assert_less_equal(real_rows, size, message=(
        'lingpipe.keras.Pipeline %r: a batch is larger than batch_size %d; pass a larger batch_size.' % (
            self.name, size)))
    with tf.control_dependencies([check]):
      padded = tf.nest.map_structure(lambda t: tf.ensure_shape(
          tf.pad(t, [[0, size - real_rows]] + [[0, 0]] * (t.shape.rank - 1)), [size] + t.shape[1:].as_list()),
                                     inputs)
    return padded, real_rows


def Concat(outputs):
  """The replicas' outputs joined along the batch."""
  return tf.nest.map_structure(lambda *parts: tf.concat(parts, 0), *outputs)


def Tensors(inputs):
  return tf.nest.map_structure(tf.convert_to_tensor, inputs)
