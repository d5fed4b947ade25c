"""What chooses a pipeline by measuring real ones: the automatic choice of K, M, remat, schedule and cut
(auto_config.py, for --pipeline=auto and keras's num_splits='auto'), what it measures on this machine and its step
trials (step_trials.py), and what the planner sees of a model (planning_view.py). It sits above the PipeliningLayer
it steps; the planner below predicts from layer times alone."""
