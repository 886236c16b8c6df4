"""pax.models.attention.attend against attention written out per head in numpy.

The einsum layouts inside attend are chosen for speed (benchmarks/bench.py); this pins their
math to the textbook definition: softmax(cap·tanh(q·kᵀ/cap) under the causal and segment masks)·v,
each query head reading its group's key/value head.
"""

import jax
import numpy as np
import pytest

from pax.models.attention import attend


def reference(q, k, v, positions, segments, cap):
    b, t, g, n, _ = q.shape
    out = np.zeros(q.shape, np.float64)
    for i in range(b):
        allowed = positions[i][:, None] >= positions[i][None, :]
        if segments is not None:
            allowed &= segments[i][:, None] == segments[i][None, :]
        for head in range(n):
            for j in range(g):
                scores = q[i, :, j, head] @ k[i, :, head].T
                if cap:
                    scores = cap * np.tanh(scores / cap)
                scores = np.where(allowed, scores, -np.inf)
                p = np.exp(scores - scores.max(-1, keepdims=True))
                out[i, :, j, head] = (p / p.sum(-1, keepdims=True)) @ v[i, :, head]
    return out


@pytest.mark.parametrize("group,segmented,cap", [(1, False, 50.0), (2, True, 0.0), (3, True, 5.0)])
def test_attend_is_masked_softmax_attention(group, segmented, cap):
    rng = np.random.default_rng(group)
    b, t, n, d = 2, 12, 2, 8
    q = rng.normal(size=(b, t, group, n, d)).astype(np.float32)
    k, v = (rng.normal(size=(b, t, n, d)).astype(np.float32) for _ in range(2))
    positions = np.broadcast_to(np.arange(t), (b, t))
    segments = np.sort(rng.integers(0, 3, (b, t)), axis=1) if segmented else None
    got = jax.jit(attend, static_argnums=(7, 8))(
        q, k, v, positions, positions, segments, segments, cap, np.float32
    )
    np.testing.assert_allclose(got, reference(q, k, v, positions, segments, cap), atol=2e-5)
