"""Tensors of any shapes kept as one TensorList per dtype: a few loop variables instead of one per tensor.

A loop body carries each tensor of its state, and each tensor it reads from outside, as one loop
variable, which TensorFlow lowers to five control-flow nodes (Enter, Merge, Switch, NextIteration,
Exit; only a resource passes with one Enter) and runs three of them every iteration. A TensorList
holds its tensors by reference, whatever their shapes: pushing and popping copies no data. GPipe's
loops keep in them what the forwards save for their backward (saved_stack.py) and the cells'
parameters (phase_loop.Invariant).
"""

import tensorflow as tf
from tensorflow.python.ops import gen_list_ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import list_ops  # pylint: disable=g-direct-tensorflow-import


def Listable(t):
  """Whether a TensorList can hold `t`: not a resource handle or a variant (another list)."""
  return t.dtype not in (tf.resource, tf.variant)


def Push(lists, tensors, device, push=True):
  """{dtype name: TensorList}: `lists` (created empty on `device` when None) with `tensors` pushed
  in order, or only created (push=False)."""
  with tf.device(device):
    lists = dict(lists or {})
    for t in tensors:
      stack = lists.get(t.dtype.name)
      if stack is None:
        stack = list_ops.empty_tensor_list(None, t.dtype)
      lists[t.dtype.name] = list_ops.tensor_list_push_back(stack, t) if push else stack
  return lists


def Pop(lists, specs, device):
  """(lists without what a Push of tensors like `specs` (tf.TensorSpec) added last, those tensors in
  order): popped, a list no longer holds them."""
  lists, popped = dict(lists), [None] * len(specs)
  with tf.device(device):
    unknown_shape = tf.constant(-1)  # One for all (list_ops.tensor_list_pop_back makes one per pop).
    for i in reversed(range(len(specs))):
      key = specs[i].dtype.name
      lists[key], popped[i] = gen_list_ops.tensor_list_pop_back(lists[key], unknown_shape, specs[i].dtype)
      popped[i].set_shape(specs[i].shape)
  return lists, popped


def Specs(tensors):
  """tf.TensorSpec of each of `tensors`, for Pop."""
  return [tf.TensorSpec(t.shape, t.dtype) for t in tensors]
