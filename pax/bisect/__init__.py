"""Which package change broke a command: groups of changes, the search over them, the
report, and the command line (`python -m pax.bisect`). No jax."""
