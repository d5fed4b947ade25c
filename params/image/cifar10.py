"""CIFAR-10 image classification: registered models image.cifar10.*."""

from lingpipe import keras as lingpipe_keras
from lingpipe.core import lr_schedule
from lingpipe.core import optimizer
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import batch_norm
from lingpipe.model import base_model_params
from lingpipe.model import model_registry
from lingpipe.params.image import imagenet
from lingpipe.tasks.image import amoebanet
from lingpipe.tasks.image import amoebanet_specs
from lingpipe.tasks.image import classifier
from lingpipe.tasks.image import input_generator
from lingpipe.tasks.image import resnet
from lingpipe.tasks.keras import models as keras_models


class _Cifar10(base_model_params.SingleTaskModelParams):
  """Datasets: the bundled sample by default; --model_params_override="input.data_dir=..." for the full set."""

  BATCH_SIZE = 64
  DATA_DIR = input_generator.SAMPLE_DIR
  BN_DECAY = 0.9  # Moving averages that settle within the ~100 steps of a run on the sample.

  def Train(self):
    return input_generator.Cifar10Input.Params().Set(split='train', data_dir=self.DATA_DIR,
                                                     batch_size=self.BATCH_SIZE)

  def Test(self):
    return input_generator.Cifar10Input.Params().Set(
        split='test', data_dir=self.DATA_DIR, batch_size=self.BATCH_SIZE, augment=False, shuffle=False,
        repeat=False, drop_remainder=False)

  def BatchNorm(self):
    return batch_norm.BatchNormLayer.Params().Set(decay=self.BN_DECAY)

  def _Task(self, name, layers, feature_dim, num_splits, num_micro_batches, remat):
    p = classifier.ImageClassifier.Params().Set(name=name)
    p.network = pipelining_layer.PipeliningLayer.Params().Set(
        layers=layers, num_splits=num_splits, num_micro_batches=num_micro_batches, remat=remat,
        input_shapes=[self.BATCH_SIZE, input_generator.IMAGE_SIZE, input_generator.IMAGE_SIZE, 3])
    p.softmax.Set(input_dim=feature_dim, num_classes=input_generator.NUM_CLASSES, label_smoothing=0.1)
    p.train.Set(optimizer=optimizer.SGD.Params().Set(momentum=0.9, nesterov=True), learning_rate=0.1,
                lr_schedule=lr_schedule.CosineSchedule.Params().Set(warmup_steps=20, total_steps=150),
                l2_regularizer_weight=5e-4, clip_gradient_norm_to_value=5.0, max_steps=150,
                save_interval_steps=50, log_interval_steps=10)
    return p


@model_registry.RegisterSingleTaskModel
class ResNet(_Cifar10):
  """ResNet-20 (0.27M parameters), the fast baseline: one cell, no micro-batching (plain speed).

  Pipeline it with --model_params_override="task.network.num_splits=2;task.network.num_micro_batches=8".
  """

  def Task(self):
    return self._Task('resnet', resnet.ResNetLayers(20, 16, self.BatchNorm()), 64, num_splits=1,
                      num_micro_batches=1, remat='never')


class _AmoebaNetD(_Cifar10):
  """AmoebaNet-D(NUM_CELLS, FILTERS) on CIFAR-10 under a PipeliningLayer, with the reference's CIFAR stem (see
  tasks/image/amoebanet.py); its drop-path, auxiliary head and dense dropout are off: the runs here are short."""

  NUM_CELLS, FILTERS = 6, 32
  NUM_SPLITS, NUM_MICRO_BATCHES, REMAT = 2, 8, 'always'

  def Task(self):
    layers, feature_dim = amoebanet.AmoebaNetLayers(self.NUM_CELLS, self.FILTERS, self.BatchNorm())
    p = self._Task('amoebanet', layers, feature_dim, self.NUM_SPLITS, self.NUM_MICRO_BATCHES, self.REMAT)
    p.network.balance = 'flops'
    return p

  @classmethod
  def ParamCount(cls):
    """Trainable parameters by the reference's structure (amoebanet_specs.ParamCount), without auxiliary head."""
    return amoebanet_specs.ParamCount('D', cls.NUM_CELLS, cls.FILTERS, input_generator.NUM_CLASSES, 'cifar',
                                      input_generator.IMAGE_SIZE, aux_head=False)


@model_registry.RegisterSingleTaskModel
class AmoebaNetD(_AmoebaNetD):
  """AmoebaNet-D(6, 32), 0.68M parameters: small enough to train on a CPU; K=2 cells on logical devices, M=8."""


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_18_256(_AmoebaNetD):  # pylint: disable=invalid-name
  """AmoebaNet-D(18, 256) on CIFAR-10: 118.6M parameters, K=4, computing in bfloat16 on float32 weights as the
  paper's TPUs did. Too big to train here."""

  NUM_CELLS, FILTERS, NUM_SPLITS = 18, 256, 4
  ONE_STEP_TEST = 'skip'  # One step takes ~2 minutes here.

  def Task(self):
    return super().Task().Set(fprop_dtype='bfloat16')


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_18_512(_AmoebaNetD):  # pylint: disable=invalid-name
  """AmoebaNet-D(18, 512) on CIFAR-10: 474.0M parameters, K=8 (the paper's AmoebaNet-B(18, 512) at ImageNet
  resolution is image.imagenet.AmoebaNetB_18_512). Builds; far too big to train on a CPU."""

  NUM_CELLS, FILTERS, NUM_SPLITS = 18, 512, 8
  ONE_STEP_TEST = 'skip'


@model_registry.RegisterSingleTaskModel
class KerasResNet50(_Cifar10):
  """`keras.applications.ResNet50(weights=None)` (23.6M parameters) under lingpipe's trainer: the Keras model is
  cut where it narrows, into K=4 cells by estimated flops, M=4, re-materialized; lingpipe's softmax on its pooled
  features. Checkpoints, resumption, evaluation and export are the trainer's own (tasks/keras/models.py)."""

  ONE_STEP_TEST = 'slow'  # ~20 s: building ResNet50 and tracing its 4 cells.

  def Task(self):
    p = self._Task('keras_resnet50', [], 2048, num_splits=4, num_micro_batches=4, remat='always')
    p.network = lingpipe_keras.PipelineParams(
        keras_models.ResNet50, {'include_top': False, 'scale': False}, input_shape=p.network.input_shapes,
        num_splits=4, num_micro_batches=4, remat='always', balance='flops')
    p.train.Set(learning_rate=0.05, l2_regularizer_weight=1e-4, max_steps=40, save_interval_steps=20,
                lr_schedule=lr_schedule.CosineSchedule.Params().Set(warmup_steps=5, total_steps=40))
    return p


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_Small_Transfer(imagenet.AmoebaNetD_Small):  # pylint: disable=invalid-name
  """Fine-tunes image.imagenet.AmoebaNetD_Small on CIFAR-10 at its 96 x 96, as the paper fine-tuned its ImageNet
  AmoebaNet-B on CIFAR-10 at 480 x 480: --model_params_override="task.train.init_from_checkpoint='<the
  pre-trained run>/train/ckpt-N'". The softmax and the auxiliary head's last layer start fresh."""

  ONE_STEP_TEST = 'skip'
  ONE_STEP_SKIP_REASON = 'fine-tunes a pre-trained run: tests/test_imagenet.py pre-trains one and fine-tunes it'

  def _Input(self, split, augment):
    return input_generator.Cifar10Input.Params().Set(
        split='train' if split == 'train' else 'test', data_dir=input_generator.SAMPLE_DIR,
        batch_size=self.BATCH_SIZE, augment=augment, image_size=self.IMAGE_SIZE, normalization='inception',
        cutout_size=0)

  def Task(self):
    p = super().Task()
    p.train.init_from_checkpoint_exclude = ['^softmax/', '^network/sub_[0-9]+/logits/']
    return p
