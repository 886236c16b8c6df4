"""Pax: experiments on JAX as configuration, with a reproducible distribution."""
