"""Training: the session as state (session), the loop (trainer), the learning-rate schedule (schedule), the
time budget (budget, progress), checkpoints and run locks, metrics, health, evaluation and presets."""
