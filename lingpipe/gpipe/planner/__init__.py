"""What predicts a pipeline's step: its memory per device, its cut into cells, its time, and the automatic choice."""
