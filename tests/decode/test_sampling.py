"""Greedy, temperature, top-k and top-p against their definitions and Pax's nucleus cut."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pax.decode.sampling import Sampling, pick, top_k_mask, top_p_mask
from pax.errors import UsageError

# Each one program per shape (and k, sampling), not one per op of its eager run.
_top_p = jax.jit(top_p_mask)
_top_k = jax.jit(top_k_mask, static_argnums=1)
_pick = jax.jit(pick, static_argnums=2)


def _praxis_top_p(logits: np.ndarray, p: float) -> np.ndarray:
    """praxis.token_samplers.top_p_mask_logits, restated in numpy from its source: sort
    ascending, count the tokens whose ascending cumulative probability stays <= 1 - p, and cut
    every logit below the first one past them."""
    ascending = np.sort(logits, axis=-1)
    probs = np.exp(ascending - ascending.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    cutoff_index = (np.cumsum(probs, axis=-1) <= 1.0 - p).sum(-1)
    cutoff = ascending[np.arange(len(logits)), cutoff_index]
    return logits >= cutoff[:, None]  # kept


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.99])
def test_top_p_keeps_what_praxis_keeps(p):
    logits = np.asarray(jax.random.normal(jax.random.key(0), (64, 50)) * 3.0)
    kept = np.asarray(_top_p(logits, p)) > -1e29
    np.testing.assert_array_equal(kept, _praxis_top_p(logits, p))


def test_top_p_on_a_hand_made_distribution():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))

    def kept(p):
        return np.flatnonzero(np.asarray(_top_p(logits, p))[0] > -1e29).tolist()

    assert kept(0.3) == [0]  # the most likely token alone has 0.5 >= 0.3
    assert kept(0.79) == [0, 1]
    assert kept(0.9) == [0, 1, 2]
    assert kept(1.0) == [0, 1, 2, 3]


def test_top_k_keeps_the_k_largest():
    logits = jnp.array([[0.1, 3.0, -1.0, 2.0, 0.5]])
    kept = np.asarray(_top_k(logits, 2))[0] > -1e29
    assert np.flatnonzero(kept).tolist() == [1, 3]


def _draws(logits, sampling, n=20000):
    keys = jax.random.split(jax.random.key(42), n)
    rows = jnp.broadcast_to(jnp.asarray(logits, jnp.float32), (n, len(logits)))
    return np.bincount(np.asarray(_pick(rows, keys, sampling)), minlength=len(logits)) / n


def test_temperature_sampling_follows_the_tempered_softmax():
    logits = np.array([2.0, 1.0, 0.0, -1.0])
    for temperature in (0.5, 1.0, 2.0):
        expected = np.exp(logits / temperature) / np.exp(logits / temperature).sum()
        freq = _draws(logits, Sampling("sample", temperature=temperature))
        # 20000 draws: a binomial's standard deviation is at most 0.0036.
        np.testing.assert_allclose(freq, expected, atol=0.015)


def test_top_k_then_top_p_then_temperature_as_pax_orders_them():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    # top_k=3 keeps {0,1,2} (mass 0.9); top_p=0.7 of those renormalized (0.44, 0.33, 0.22)
    # keeps {0,1}; temperature 2 then flattens the draw between them: sqrt-weights 0.4, 0.3.
    freq = _draws(logits, Sampling("sample", temperature=2.0, top_k=3, top_p=0.7))
    w = np.sqrt([0.4, 0.3])
    np.testing.assert_allclose(freq, [w[0] / w.sum(), w[1] / w.sum(), 0, 0], atol=0.015)


def test_greedy_is_argmax_and_ids_past_the_tokenizer_are_never_picked():
    logits = jnp.array([[0.0, 1.0, 5.0, 9.0], [3.0, 1.0, 0.0, 2.0]])
    keys = jax.random.split(jax.random.key(0), 2)
    assert _pick(logits, keys, Sampling()).tolist() == [3, 0]
    assert _pick(logits, keys, Sampling(vocab=3)).tolist() == [2, 0]
    sampled = _draws(np.array([0.0, 0.0, 0.0, 9.0]), Sampling("sample", vocab=3), n=2000)
    assert sampled[3] == 0


@pytest.mark.parametrize(
    "sampling, message",
    [
        (Sampling("beam"), "unknown sampling 'beam'"),
        (Sampling("sample", temperature=0.0), "temperature 0.0 must be > 0"),
        (Sampling("sample", top_k=300), "top_k 300 must be in 0..256"),
        (Sampling("sample", top_p=1.5), "top_p 1.5 must be in (0, 1]"),
        (Sampling("sample", top_p=0.0), "top_p 0.0 must be in (0, 1]"),
    ],
)
def test_bad_sampling_options_are_usage_errors(sampling, message):
    with pytest.raises(UsageError) as e:
        sampling.check(256)
    assert message in str(e.value)
