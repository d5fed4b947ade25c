"""Every task of a remote cluster must see the logdir: each worker writes and reads its own variables' shard of a
checkpoint there (checkpointer.Options), so the logdir is one path that all hosts share (a shared or network file
system mounted at the same place), as TensorFlow's distributed checkpoints require.

`Check` proves it before step 0: the trainer writes a file with a random token into the folder, and each worker
reads it back and writes one of its own there, through TensorFlow ops on the worker's CPU (for eval, which writes
nothing there, each worker reads the checkpoint's index instead). A worker that cannot is one line naming it, the
path and why.
"""

import os
import secrets

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.distributed import remote
from lingpipe.logdir import temporaries


def _FirstLine(error):
  return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def Check(mesh, folder, existing=None):
  """Raises ClusterError unless every worker of remote cluster `mesh` reads and writes `folder` as this process sees
  it (made if missing), or, given `existing` (a file in it), reads that file as this process does. Nothing is left
  behind."""
  folder = os.path.abspath(folder)
  written = []
  if existing is None:
    os.makedirs(folder, exist_ok=True)
    probe = temporaries.Name(os.path.join(folder, 'shared-logdir-check'))  # The next writer removes it if killed.
    with open(probe, 'wb') as f:
      f.write(secrets.token_hex(16).encode())
    written.append(probe)
  else:
    probe = existing
  try:
    with open(probe, 'rb') as f:
      expected = f.read()
    for task, address in mesh.Tasks():
      where = 'Worker %s at %s' % (remote.TaskName(mesh.job, task), address)
      theirs = temporaries.Name(os.path.join(folder, 'shared-logdir-check-task%d' % task))
      if existing is None:
        written.append(theirs)
      try:
        with tf.device('%s/device:CPU:0' % remote.TaskName(mesh.job, task)):
          seen = _ReadAndWrite(probe, None if existing else theirs).numpy()
      except tf.errors.OpError as e:
        raise errors.ClusterError(
            '%s cannot use the logdir %s (%s). Each worker saves and restores its own variables there, so the logdir '
            'must be one path every task sees: a shared or network file system mounted at the same path on every '
            'host.' % (where, folder, _FirstLine(e))) from e
      if seen != expected or (existing is None and not os.path.isfile(theirs)):
        raise errors.ClusterError(
            '%s sees another folder at %s than this trainer does (a file written on one side did not reach the '
            'other). Mount one shared file system at the same path on every host.' % (where, folder))
  finally:
    for path in written:
      if os.path.lexists(path):
        os.remove(path)


@tf.function(autograph=False)
def _ReadAndWrite(path, copy_to):
  """The content of `path`, once (unless `copy_to` is None) it is also written to `copy_to`: one function, so the
  answer waits for the write (remote eager ops run asynchronously)."""
  data = tf.io.read_file(path)
  if copy_to is None:
    return data
  with tf.control_dependencies([tf.io.write_file(copy_to, data)]):
    return tf.identity(data)
