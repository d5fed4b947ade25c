"""ImageClassifier: the Classifier task on batch.image / batch.label, serving uint8 images."""

import tensorflow as tf

from lingpipe.core.nested_map import NestedMap
from lingpipe.tasks import classifier
from lingpipe.tasks.image import input_generator


class ImageClassifier(classifier.Classifier):
  """Softmax cross-entropy (label smoothing in softmax.label_smoothing), top-1 and top-5 accuracy.

  Inference maps uint8 images [N, image_size, image_size, 3] to class probabilities, normalizing them as the
  input generator does.
  """

  @classmethod
  def Params(cls):
    p = super().Params()
    p.input_key, p.label_key, p.input_dim = 'image', 'label', 3
    p.Define('image_size', input_generator.IMAGE_SIZE, 'Height and width of the input images.')
    return p

  def Inference(self):
    p = self.params
    spec = NestedMap(images=tf.TensorSpec([None, p.image_size, p.image_size, 3], tf.uint8, name='images'))

    def Serve(images):
      out = self.ComputePredictions(NestedMap({p.input_key: input_generator.Normalize(images)}))
      probs = tf.nn.softmax(out.logits)
      return {'probs': probs, 'class_ids': tf.argmax(probs, -1, output_type=tf.int32)}

    return {'serving_default': (Serve, spec)}
