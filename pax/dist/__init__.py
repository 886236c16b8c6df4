"""Pax's distribution tooling: lockfiles, releases, pinned environments.

Imports nothing outside the standard library (no jax, no packaging), because nox runs
it from the small tools venv (`./noxw`) before any release environment exists.
"""
