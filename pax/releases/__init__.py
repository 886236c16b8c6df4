"""Lockfiles and releases: the lockfile model, pip-tools compilation, release metadata
(releases/<version>/release.toml), diffs between locks, cutting a release and the README
blocks generated from them. Standard library and `packaging` only: nox runs it from the
tools venv before any release environment exists."""
