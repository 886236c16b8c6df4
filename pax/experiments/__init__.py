"""Experiments: the base class, the registry, overrides and resolved config records."""
