"""Launching on clusters: Kubernetes JobSets and Slurm batch scripts that start a release's
image (or venv) on every host (`python -m pax.launch`). No jax."""
