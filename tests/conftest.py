"""Shared test set-up: quiet TensorFlow, and helpers used by several test files."""

import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
