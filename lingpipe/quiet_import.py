"""Imports TensorFlow without its start-up INFO lines.

TF 2.21 prints a few INFO lines ("oneDNN custom operations are on", "All log messages before
absl::InitializeLog()...") to file descriptor 2 before its own logging honours TF_CPP_MIN_LOG_LEVEL. We capture
fd 2 while TensorFlow loads and replay everything except those lines, so warnings and errors still show, and
nothing is hidden when the user sets TF_CPP_MIN_LOG_LEVEL=0.
"""

import os
import re
import sys
import tempfile

_NOISE = re.compile(r'^(I\d{4} [\d:.]+ +\d+ \S+\] |WARNING: All log messages before absl::Initialize'
                    r'Log\(\) is called are written to STDERR|To enable the following instructions:)')


def ImportTensorFlow():
  if 'tensorflow' in sys.modules or os.environ.get('TF_CPP_MIN_LOG_LEVEL', '0') == '0':
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    return
  try:
    sys.stderr.flush()
    saved = os.dup(2)
  except (OSError, ValueError):  # No usable fd 2 (embedded interpreters): import plainly.
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
    return
  with tempfile.TemporaryFile(mode='w+b') as captured:
    os.dup2(captured.fileno(), 2)
    try:
      import tensorflow  # pylint: disable=g-import-not-at-top,unused-import,redefined-outer-name
    finally:
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      text = captured.read().decode('utf-8', 'replace')
      kept = [line for line in text.splitlines(keepends=True) if not _NOISE.match(line)]
      if kept:
        sys.stderr.write(''.join(kept))
        sys.stderr.flush()
