"""Container images from a release lock: the wheelhouse, the Docker build, the offline smoke
run and publishing to a registry (`python -m pax.images build|smoke|publish`). No jax."""
