"""The side without a cache: every step runs the model over the whole sequence so far,
padded up to a multiple of BUCKET tokens so that it compiles once per bucket."""

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

BUCKET = 64


def bucket(length: int) -> int:
    return -(-length // BUCKET) * BUCKET


class Recompute:
    """Greedy decoding without a cache: the model over the sequence so far, every step."""

    def __init__(self, model, variables, batch, new: int):
        self.model, self.variables, self.new = model, variables, new
        self.start = batch.tokens.shape[1]
        total = bucket(self.start + new)
        pad = total - self.start
        self.tokens = jnp.pad(jnp.asarray(batch.tokens), ((0, 0), (0, pad)))
        # Generated tokens take positions on from each prompt's last; the slots not yet written
        # are segment 0, which real tokens (segment 1) never attend to.
        last = batch.positions[:, -1:]
        self.positions = jnp.asarray(
            np.concatenate([batch.positions, last + 1 + np.arange(pad)], axis=1)
        )
        self.segments = jnp.pad(jnp.asarray(batch.segment_ids), ((0, 0), (0, pad)))
        self._step = jax.jit(self._step_fn, static_argnums=4, donate_argnums=(1, 2))

    def _step_fn(self, variables, tokens, segments, n, length):
        logits = self.model.apply(
            variables, tokens[:, :length], self.positions[:, :length], segments[:, :length]
        )
        token = jnp.argmax(jax.lax.dynamic_index_in_dim(logits, n - 1, 1, False), -1)
        tokens = jax.lax.dynamic_update_index_in_dim(tokens, token.astype(tokens.dtype), n, 1)
        segments = jax.lax.dynamic_update_index_in_dim(
            segments, jnp.ones_like(token, segments.dtype), n, 1
        )
        return tokens, segments

    def lengths(self):
        """The bucket each step runs at."""
        return [bucket(self.start + i) for i in range(self.new)]

    def run(self):
        """The whole loop; the generated tokens (batch, new)."""
        tokens, segments = jnp.array(self.tokens), jnp.array(self.segments)  # donated below
        for i, length in enumerate(self.lengths()):
            tokens, segments = self._step(self.variables, tokens, segments, self.start + i, length)
        return np.asarray(tokens[:, self.start : self.start + self.new])

    def step_seconds(self, length: int, repeats: int) -> float:
        """Median time of one step at a bucket length (compiled and warmed first)."""
        times = []
        for r in range(repeats + 1):
            tokens, segments = jnp.array(self.tokens), jnp.array(self.segments)
            jax.block_until_ready((tokens, segments))
            start = time.perf_counter()
            jax.block_until_ready(self._step(self.variables, tokens, segments, length - 1, length))
            if r:
                times.append(time.perf_counter() - start)
        return statistics.median(times)
