"""Training: state, step functions, the loop, metrics, summaries and the run manifest."""
