"""ImageClassifier: the Classifier task on batch.image / batch.label, serving uint8 images."""

import tensorflow as tf

from lingpipe.core import context
from lingpipe.core import errors
from lingpipe.core import param_checks
from lingpipe.core.nested_map import NestedMap
from lingpipe.tasks import classifier
from lingpipe.tasks.image import imagenet_input
from lingpipe.tasks.image import input_generator

NORMALIZATIONS = {'cifar': input_generator.Normalize, 'inception': imagenet_input.Normalize}


class ImageClassifier(classifier.Classifier):
  """Softmax cross-entropy (label smoothing in softmax.label_smoothing), top-1 and top-5 accuracy.

  A network may also return auxiliary logits (NestedMap(features, aux_logits), e.g. AmoebaNet's auxiliary head):
  in training their cross-entropy, weighted by aux_loss_weight, is added to the loss.

  Inference maps uint8 images [N, image_size, image_size, 3] to class probabilities, normalizing them as the
  input generator does (`normalization`).
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.input_key, p.label_key, p.input_dim = 'image', 'label', 3
    p.Define('image_size', input_generator.IMAGE_SIZE, 'Height and width of the input images.')
    p.Define('normalization', 'cifar', "How the input generator normalized the pixels, for serving: 'cifar' "
             "(CIFAR-10's per-channel mean and deviation, input_generator.py) or 'inception' (to [-1, 1], "
             "imagenet_input.py).", check=param_checks.OneOf(*NORMALIZATIONS))
    p.Define('aux_loss_weight', 0.4, 'Weight of the auxiliary logits\' cross-entropy in training, where the '
             'network returns them.', check=param_checks.Float(0))
    return p

  def PredictionsFromPipeline(self, outputs, batch):
    del batch  # Unused.
    if isinstance(outputs, dict):
      if 'features' not in outputs:
        raise errors.ConfigError('Task %s: the network returned %s; expected features (and aux_logits).' % (
            self.path, ', '.join(sorted(outputs))))
      out = NestedMap(logits=self.softmax.Logits(outputs['features']))
      if 'aux_logits' in outputs:
        out.aux_logits = outputs['aux_logits']
      return out
    return NestedMap(logits=self.softmax.Logits(outputs))

  def ComputeLoss(self, batch, predictions):
    loss, metrics = super().ComputeLoss(batch, predictions)
    aux_logits = predictions.get('aux_logits')
    if aux_logits is None or not context.IsTraining() or not self.params.aux_loss_weight:
      return loss, metrics
    labels = tf.cast(batch[self.params.label_key], tf.int32)
    aux = self.softmax.XentLoss(tf.cast(aux_logits, tf.float32), labels).avg_xent
    weight = metrics['loss'][1]
    total = loss + self.params.aux_loss_weight * aux
    metrics.update(loss=(total, weight), main_loss=(loss, weight), aux_loss=(aux, weight))
    return total, metrics

  def Inference(self):
    p = self.params
    spec = NestedMap(images=tf.TensorSpec([None, p.image_size, p.image_size, 3], tf.uint8, name='images'))
    normalize = NORMALIZATIONS[p.normalization]

    def Serve(images):
      out = self.ComputePredictions(NestedMap({p.input_key: normalize(images)}))
      probs = tf.nn.softmax(out.logits)
      return {'probs': probs, 'class_ids': tf.argmax(probs, -1, output_type=tf.int32)}

    return {'serving_default': (Serve, spec)}
