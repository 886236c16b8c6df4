"""Pax's language-model experiments: every module here registers its classes."""
