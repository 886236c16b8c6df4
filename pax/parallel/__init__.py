"""Partitioning: the device mesh and the logical-axis rules that place arrays on it."""
