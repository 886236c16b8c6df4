"""Optimizers (optax) and Pax's learning-rate schedules."""
