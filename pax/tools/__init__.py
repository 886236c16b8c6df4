"""Command-line tools that drive the trainer: AOT compile tables, the FP8 check on a GPU,
recording reference curves. The library packages below never import these."""
