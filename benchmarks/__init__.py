"""Benchmarks: the trainer against a hand-written loop and the hardware (`./noxw -s bench`)."""
