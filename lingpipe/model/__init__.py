"""A registered model: its Params (base_model_params.py), its task, the training step (base_task.py), and the
registry that finds it by name (model_registry.py). It builds on core and distributed."""
