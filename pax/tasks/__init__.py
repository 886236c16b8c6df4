"""Experiments under Pax's names."""
