"""Checkpoints training set aside, moved (never deleted) into a folder beside the others: train/corrupt/ for files
that do not restore, train/diverged/ for weights that gave a non-finite loss. The index no longer names them, so
training resumes from the checkpoint before and eval, decode and export do not pick them."""

import os
import shutil

from lingpipe.logdir import checkpointer

CORRUPT_DIR = 'corrupt'
DIVERGED_DIR = 'diverged'


def Quarantine(prefix, folder=CORRUPT_DIR):
  """Moves checkpoint `prefix`'s files into <its folder>/<folder>/ (kept for inspection, never deleted); returns
  that folder. If a checkpoint of the same name was set aside before, this one becomes <name>_1 (then _2, ...),
  its files renamed together so it still restores by that prefix."""
  target = os.path.join(os.path.dirname(prefix), folder)
  os.makedirs(target, exist_ok=True)
  name = os.path.basename(prefix)
  renamed, n = name, 0
  while checkpointer.CheckpointFiles(os.path.join(target, renamed)):
    n += 1
    renamed = '%s_%d' % (name, n)
  for path in checkpointer.CheckpointFiles(prefix):
    shutil.move(path, os.path.join(target, renamed + os.path.basename(path)[len(name):]))
  return target


def SetAsideDiverged(train_dir, step):
  """A training step from the weights of step `step` gave a non-finite loss. If the newest checkpoint holds those
  weights (ckpt-<step>), moves its files into train/diverged/ and rewrites the index without it, so training, eval,
  decode and export go on from the one before. Returns (the folder it went to or None, the newest good checkpoint
  or None)."""
  latest = checkpointer.LatestCheckpoint(train_dir)
  if not latest or checkpointer.Step(latest) != step:  # The weights that diverged were never saved.
    return None, latest
  folder = Quarantine(latest, DIVERGED_DIR)
  kept = checkpointer.CompleteOnDisk(train_dir)
  checkpointer.WriteIndex(train_dir, kept)
  return folder, kept[-1] if kept else None


def SetAsideFolder(prefix):
  """The set-aside folder (corrupt/ or diverged/) checkpoint `prefix` lies in, or None."""
  folder = os.path.basename(os.path.dirname(os.path.abspath(prefix)))
  return folder if folder in (CORRUPT_DIR, DIVERGED_DIR) else None
