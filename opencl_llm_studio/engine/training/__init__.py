"""Training: the session as state (session), the loop (trainer), the learning-rate schedule (schedule), the
time budget (budget), run locks, health, evaluation and presets."""
