"""What chooses a pipeline by measuring real ones: the automatic choice of K, M, remat, schedule and cut
(auto_config.py, for --pipeline=auto and keras's num_splits='auto'), its step trials and the call costs. It sits
above the PipeliningLayer it steps; the planner below predicts from layer times alone."""
