"""lingpipe for Keras users: pipeline a list of Keras layers, a keras.Sequential or a functional keras.Model.

    import lingpipe.keras
    pipelined = lingpipe.keras.Pipeline(model, num_splits=2, num_micro_batches=4)
"""

from lingpipe.keras.cut import NarrowPoints
from lingpipe.keras.keras_layer import KerasLayer
from lingpipe.keras.keras_layer import KerasRef
from lingpipe.keras.network_params import PipelineParams
from lingpipe.keras.pipeline import Pipeline

__all__ = ['KerasLayer', 'KerasRef', 'NarrowPoints', 'Pipeline', 'PipelineParams']
