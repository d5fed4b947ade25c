"""What runs a pipeline's step: the executor, its backward strategies, re-materialization and loops."""
