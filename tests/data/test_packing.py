"""Packed rows in the model: attention stays inside each document; the loss ignores padding."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pax.experiments.config import ModelConfig
from pax.models.transformer import TransformerLm, lm_loss

# Two documents (6 and 7 tokens) and 3 tokens of padding in one row of 16.
SEGMENTS = np.array([[1] * 6 + [2] * 7 + [0] * 3])
POSITIONS = np.array([list(range(6)) + list(range(7)) + [0] * 3])
SECOND = SEGMENTS[0] == 2
# The same 16 tokens read as one document.
ONE_DOC = np.ones_like(SEGMENTS), np.arange(16)[None]


@pytest.fixture(scope="module")
def lm():
    """(logits(tokens, positions, segment_ids), a row of tokens) of a 2-layer model, jitted once."""
    # ModelConfig's 2 layers and 4 heads (of 8 dims here), grouped-query over 2 key/value heads.
    cfg = ModelConfig(vocab_size=64, model_dims=32, hidden_dims=64, num_kv_heads=2, seq_len=16)
    model = TransformerLm(dataclasses.replace(cfg, dims_per_head=8, embedding_init_std=32**-0.5))
    tokens = np.array(jax.random.randint(jax.random.key(0), (1, 16), 1, 64))
    variables = jax.jit(model.init)(jax.random.key(1), tokens, POSITIONS, SEGMENTS)
    apply = jax.jit(model.apply)
    return lambda t, p, s: np.array(apply(variables, t, p, s))[0], tokens


def test_documents_do_not_see_each_other(lm):
    logits, tokens = lm
    other = tokens.copy()
    other[0, :6] = (other[0, :6] + 7) % 64  # rewrite the first document
    base = logits(tokens, POSITIONS, SEGMENTS)
    changed = logits(other, POSITIONS, SEGMENTS)
    np.testing.assert_allclose(changed[SECOND], base[SECOND], atol=1e-5)
    assert not np.allclose(changed[~SECOND], base[~SECOND], atol=1e-3)
    # Read as one document, the second part attends to the first: the check can fail.
    s, p = ONE_DOC
    assert not np.allclose(logits(other, p, s)[SECOND], logits(tokens, p, s)[SECOND], atol=1e-3)


def test_a_document_reads_the_same_wherever_it_is_packed(lm):
    logits, tokens = lm
    alone = np.zeros_like(tokens)
    alone[0, :7] = tokens[0, SECOND]  # the second document at the start of a row of its own
    segments = np.array([[1] * 7 + [0] * 9])
    positions = np.array([list(range(7)) + [0] * 9])
    np.testing.assert_allclose(
        logits(tokens, POSITIONS, SEGMENTS)[SECOND],
        logits(alone, positions, segments)[:7],
        atol=1e-5,
    )


def test_causal_inside_a_document(lm):
    logits, tokens = lm
    later = tokens.copy()
    later[0, 10] = (later[0, 10] + 1) % 64  # a token in the middle of the second document
    base, out = logits(tokens, POSITIONS, SEGMENTS), logits(later, POSITIONS, SEGMENTS)
    np.testing.assert_allclose(out[:10], base[:10], atol=1e-5)
    assert not np.allclose(out[10:13], base[10:13], atol=1e-3)


def test_loss_ignores_padding():
    weights = np.float32(SEGMENTS > 0)

    @jax.jit  # one program rather than one per op
    def losses():
        logits = jax.random.normal(jax.random.key(2), (1, 16, 64))
        targets = jax.random.randint(jax.random.key(3), (1, 16), 0, 64)
        loss, metrics = lm_loss(logits, targets, weights)
        moved = lm_loss(logits.at[0, 13:].set(5.0), targets.at[0, 13:].set(0), weights)[0]
        unweighted = lm_loss(logits, targets, jnp.ones_like(weights))[0]
        return loss, metrics, moved, unweighted

    loss, metrics, moved, unweighted = losses()
    np.testing.assert_allclose(moved, loss, rtol=1e-6)
    assert metrics["num_tokens"] == 13
    assert not np.isclose(unweighted, loss, rtol=1e-3)
