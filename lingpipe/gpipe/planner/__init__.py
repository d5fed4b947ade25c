"""What predicts a pipeline's step from its layers: its memory per device, its cut into cells, its time. The choice
that steps real pipelines to decide is gpipe/choice/."""
