"""ImageNet-format image classification: registered models image.imagenet.*.

The data are ImageNet-format (tasks/image/imagenet_input.py): give their folder with
--model_params_override="input.data_dir=..." (class folders of JPEGs, or TFRecords from tools/prepare_imagenet.py).
The models follow the reference AmoebaNet set-up (tensorflow/tpu amoeba_net): RMSProp (decay 0.9, momentum 0.9,
epsilon 1.0), exponential learning-rate decay (0.97 every 2.4 epochs after 3 warm-up epochs), weight decay 4e-5,
label smoothing 0.1, batch norm decay 0.9997, drop-path keep 0.7 reached at the end of training, dense dropout
keep 0.5, an auxiliary head weighted 0.4 and gradient clipping at 10.
"""

from lingpipe.core import lr_schedule
from lingpipe.core import optimizer
from lingpipe.gpipe import pipelining_layer
from lingpipe.layers import batch_norm
from lingpipe.model import base_model_params
from lingpipe.model import model_registry
from lingpipe.tasks.image import amoebanet
from lingpipe.tasks.image import amoebanet_specs
from lingpipe.tasks.image import classifier
from lingpipe.tasks.image import imagenet_input

NUM_TRAIN_IMAGES = 1281167  # ImageNet-2012's training set: epochs are counted in it.


class _AmoebaNet(base_model_params.SingleTaskModelParams):
  """AmoebaNet-GENOTYPE(NUM_CELLS, FILTERS) at IMAGE_SIZE under a PipeliningLayer of NUM_SPLITS cells."""

  GENOTYPE, NUM_CELLS, FILTERS = 'D', 18, 208
  IMAGE_SIZE, NUM_CLASSES, BATCH_SIZE = 224, 1001, 128
  NUM_SPLITS, NUM_MICRO_BATCHES, REMAT = 1, 1, 'always'
  NUM_EPOCHS, WARMUP_EPOCHS = 100, 3.0
  DATA_DIR = None
  ONE_STEP_TEST = 'skip'
  ONE_STEP_SKIP_REASON = 'needs ImageNet-format data (tests/test_imagenet.py builds a small set and trains on it)'

  def _Input(self, split, augment):
    return imagenet_input.ImagenetInput.Params().Set(
        split=split, data_dir=self.DATA_DIR, image_size=self.IMAGE_SIZE, batch_size=self.BATCH_SIZE,
        augment=augment, num_classes=self.NUM_CLASSES)

  def Train(self):
    return self._Input('train', True)

  def Test(self):
    return self._Input('validation', False).Set(shuffle=False, repeat=False, drop_remainder=False)

  def StepsPerEpoch(self):
    return max(1, NUM_TRAIN_IMAGES // self.BATCH_SIZE)

  def Task(self):
    total_steps = self.StepsPerEpoch() * self.NUM_EPOCHS
    layers, feature_dim = amoebanet.AmoebaNetLayers(
        self.NUM_CELLS, self.FILTERS, batch_norm.BatchNormLayer.Params().Set(decay=0.9997, epsilon=1e-3),
        genotype=self.GENOTYPE, stem='imagenet', image_size=self.IMAGE_SIZE, num_classes=self.NUM_CLASSES,
        drop_path_keep_prob=0.7, drop_path_burn_in_steps=total_steps, dense_dropout_keep_prob=0.5)
    p = classifier.ImageClassifier.Params().Set(name='amoebanet', image_size=self.IMAGE_SIZE,
                                                normalization='inception', aux_loss_weight=0.4)
    p.network = pipelining_layer.PipeliningLayer.Params().Set(
        layers=layers, num_splits=self.NUM_SPLITS, num_micro_batches=self.NUM_MICRO_BATCHES, remat=self.REMAT,
        balance='flops', input_shapes=[self.BATCH_SIZE, self.IMAGE_SIZE, self.IMAGE_SIZE, 3])
    p.softmax.Set(input_dim=feature_dim, num_classes=self.NUM_CLASSES, label_smoothing=0.1)
    steps_per_epoch = self.StepsPerEpoch()
    p.train.Set(optimizer=optimizer.RMSProp.Params().Set(decay=0.9, momentum=0.9, epsilon=1.0),
                learning_rate=0.015 * self.BATCH_SIZE / 32,  # The reference's 0.015 at batch 32, scaled linearly.
                lr_schedule=lr_schedule.ExponentialSchedule.Params().Set(
                    warmup_steps=int(self.WARMUP_EPOCHS * steps_per_epoch), decay_steps=int(2.4 * steps_per_epoch),
                    decay_rate=0.97,
                    min_ratio=1e-4),
                l2_regularizer_weight=4e-5 / 2, clip_gradient_norm_to_value=10.0, max_steps=total_steps,
                save_interval_steps=1000, log_interval_steps=100)
    return p

  @classmethod
  def ParamCount(cls):
    """Trainable parameters by the reference's structure (amoebanet_specs.ParamCount), auxiliary head included."""
    return amoebanet_specs.ParamCount(cls.GENOTYPE, cls.NUM_CELLS, cls.FILTERS, cls.NUM_CLASSES, 'imagenet',
                                      cls.IMAGE_SIZE)


@model_registry.RegisterSingleTaskModel
class AmoebaNetB_18_512(_AmoebaNet):  # pylint: disable=invalid-name
  """The GPipe paper's ImageNet model: AmoebaNet-B(18, 512) at 480 x 480, 557M parameters (559M with the
  auxiliary head), K=4 here. Far too big to train on a CPU; --mode=inspect prints its size and plan."""

  GENOTYPE, FILTERS, IMAGE_SIZE, BATCH_SIZE = 'B', 512, 480, 64
  NUM_SPLITS, NUM_MICRO_BATCHES = 4, 16


class _TableOne(_AmoebaNet):
  """The GPipe paper's Table 1 AmoebaNet-D sizes: the largest that fit 8 GB accelerators, at 224 x 224, batch
  128."""


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_18_208(_TableOne):  # pylint: disable=invalid-name
  """Table 1, one accelerator without GPipe: 82M parameters."""

  NUM_CELLS, FILTERS, REMAT = 18, 208, 'never'


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_18_416(_TableOne):  # pylint: disable=invalid-name
  """Table 1, one accelerator with re-materialization: 318M parameters."""

  NUM_CELLS, FILTERS = 18, 416


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_18_544(_TableOne):  # pylint: disable=invalid-name
  """Table 1, 2 partitions: 542M parameters."""

  NUM_CELLS, FILTERS, NUM_SPLITS, NUM_MICRO_BATCHES = 18, 544, 2, 8


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_36_544(_TableOne):  # pylint: disable=invalid-name
  """Table 1, 4 partitions: 1.05B parameters."""

  NUM_CELLS, FILTERS, NUM_SPLITS, NUM_MICRO_BATCHES = 36, 544, 4, 16


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_72_512(_TableOne):  # pylint: disable=invalid-name
  """Table 1, 8 partitions: 1.8B parameters."""

  NUM_CELLS, FILTERS, NUM_SPLITS, NUM_MICRO_BATCHES = 72, 512, 8, 32


@model_registry.RegisterSingleTaskModel
class AmoebaNetD_Small(_AmoebaNet):  # pylint: disable=invalid-name
  """AmoebaNet-D(3, 16) at 96 x 96 with the reference's ImageNet stem, auxiliary head and set-up, K=2, M=4: trains
  on a CPU on a small ImageNet-format set (e.g. the bundled CIFAR-10 sample as class folders of JPEGs:
  tools/prepare_imagenet.py --write_sample_tree)."""

  NUM_CELLS, FILTERS, IMAGE_SIZE, NUM_CLASSES, BATCH_SIZE = 3, 16, 96, 10, 32
  NUM_SPLITS, NUM_MICRO_BATCHES, NUM_EPOCHS, WARMUP_EPOCHS = 2, 4, 1, 0.1

  def StepsPerEpoch(self):
    return 200
