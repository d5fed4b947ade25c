"""Restoring a checkpoint one variable at a time, each read on its own variable's task.

TensorFlow's restore reads every variable a task holds (weights and optimizer slots) in one op before it assigns
any, so for a moment a process holds its variables twice, and a model that trained under a memory budget could not
be resumed or evaluated under it. Here each value is read and assigned before the next is read.
"""

import tensorflow as tf
from tensorflow.python.checkpoint import graph_view
from tensorflow.python.checkpoint import util as checkpoint_util
from tensorflow.python.trackable import trackable_utils
from tensorflow.python.training.saving import saveable_object_util

from lingpipe.core import errors

_VALUE = 'VARIABLE_VALUE'
_SAVE_COUNTER = 'save_counter/.ATTRIBUTES/VARIABLE_VALUE'


def _Walk(root):
  """(every trackable under tf.train.Checkpoint `root`, {object: its path from the root}, {key: variable}): the
  variables named as TensorFlow names them in a checkpoint (the shortest path from the root, escaped)."""
  objects, paths, _, _, names = checkpoint_util.objects_ids_and_slot_variables_and_paths(
      graph_view.ObjectGraphView(root))
  keys = {trackable_utils.checkpoint_key(names[obj], _VALUE): obj for obj in objects if isinstance(obj, tf.Variable)}
  return objects, paths, keys


def VariableKeys(root):
  """{checkpoint key: variable} of every variable under tf.train.Checkpoint `root`."""
  return _Walk(root)[2]


def _HasOtherState(obj):
  """Whether trackable `obj` saves something besides variables (a dataset iterator's position, a table)."""
  if isinstance(obj, tf.Variable):
    return False
  if saveable_object_util.trackable_has_serialize_to_tensor(obj):
    return True
  return bool(obj._gather_saveables_for_checkpoint())  # pylint: disable=protected-access


def _Split(root):
  """({key: variable} to restore one by one, [names of root's children restored whole]): a child of the root that
  saves anything besides variables is restored by TensorFlow, with its variables."""
  objects, paths, keys = _Walk(root)
  whole = sorted({paths[obj][0].name for obj in objects if obj is not root and _HasOtherState(obj)})
  return {k: v for k, v in keys.items() if k.split('/', 1)[0] not in whole}, whole


def _ReadDevice(variable):
  """The CPU of the task that holds `variable` (RestoreV2 has only a CPU kernel)."""
  spec = tf.DeviceSpec.from_string(variable.device or '')
  return spec.replace(device_type='CPU', device_index=0).to_string()


def _Listed(keys, limit=3):
  return '%s%s' % (', '.join(keys[:limit]), ', ...' if len(keys) > limit else '')


def _Mismatches(keys, reader, whole, exact):
  """What keeps variables `keys` ({checkpoint key: variable}) from restoring from checkpoint `reader`, as a list of
  phrases: keys missing from the checkpoint, other shapes or dtypes, and if `exact`, variables of the checkpoint
  that the model lacks (other than under the children `whole`, which TensorFlow matches)."""
  shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
  missing = sorted(k for k in keys if k not in shapes)
  other = sorted(k for k in keys if k in shapes and (list(shapes[k]) != keys[k].shape.as_list()
                                                     or dtypes[k] != keys[k].dtype.base_dtype))
  problems = []
  if missing:
    problems.append('%d variable(s) not in the checkpoint (%s)' % (len(missing), _Listed(missing)))
  if other:
    key = other[0]
    problems.append('%d of another shape or dtype (%s: checkpoint %s %s, model %s %s%s)' % (
        len(other), key, dtypes[key].name, list(shapes[key]), keys[key].dtype.base_dtype.name,
        keys[key].shape.as_list(), ', ...' if len(other) > 1 else ''))
  if exact:
    extra = sorted(k for k in shapes if k.endswith('/' + _VALUE) and k not in keys
                   and k.split('/', 1)[0] not in whole)
    if extra:
      problems.append('%d variable(s) in the checkpoint but not in this model (%s)' % (len(extra), _Listed(extra)))
  return problems


def Restore(root, path, exact, options=None):
  """Restores tf.train.Checkpoint `root` from checkpoint `path`, each variable read and assigned on its own task
  before the next is read.

  Args:
    root: a tf.train.Checkpoint.
    path: a checkpoint prefix.
    exact: every variable of the checkpoint must be in `root`; else only `root`'s must be in the checkpoint.
    options: tf.train.CheckpointOptions for the children TensorFlow restores whole.

  Raises:
    CheckpointError: a mismatch, before anything is assigned.
    tf.errors.OpError: a file cannot be read.
  """
  reader = tf.train.load_checkpoint(path)
  if reader.has_tensor(_SAVE_COUNTER):
    root.save_counter  # pylint: disable=pointless-statement  (made on first use; the checkpoint has one)
  keys, whole = _Split(root)
  problems = _Mismatches(keys, reader, whole, exact)
  if problems:
    raise errors.CheckpointError('Checkpoint %s does not match this model: %s. Use a fresh --logdir for a changed '
                                 'model.' % (path, '; '.join(problems)))
  prefix = tf.constant(path)
  for key in sorted(keys):
    variable = keys[key]
    with tf.device(_ReadDevice(variable)):
      value, = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[key], shape_and_slices=[''],
                                    dtypes=[variable.dtype.base_dtype])
      variable.assign(value)
    del value  # Released before the next read.
  for name in whole:
    status = tf.train.Checkpoint(**{name: getattr(root, name)}).read(path, options=options)
    status.expect_partial().assert_existing_objects_matched()
