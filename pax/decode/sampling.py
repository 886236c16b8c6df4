"""Picking the next token from logits: greedy, or sampling with temperature, top-k and top-p.

Pax's decoders (praxis.decoder_hparams): GreedyDecoderHParams and SampleDecoderHParams, whose
sampler keeps the k most likely tokens and/or the smallest set of most likely tokens whose
probabilities add up to at least p (nucleus sampling, praxis.token_samplers.top_p_mask_logits),
then draws from the softmax of the kept logits divided by the temperature.
"""

import dataclasses

import jax
import jax.numpy as jnp

from pax.errors import UsageError

SAMPLINGS = ("greedy", "sample")
_MASKED = -1e30  # below any real logit, finite so a fully masked row cannot make NaNs


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How each token is picked; hashable, so one compiled decoder serves one Sampling."""

    method: str = "greedy"  # 'greedy' | 'sample'
    temperature: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0  # 1.0: no nucleus cut
    vocab: int = 0  # > 0: ids >= vocab are never picked (the tokenizer has fewer ids)

    def check(self, model_vocab: int) -> "Sampling":
        """Itself, or UsageError naming the bad option and a good value."""
        if self.method not in SAMPLINGS:
            raise UsageError(
                f"unknown sampling {self.method!r}; use one of {', '.join(SAMPLINGS)} "
                "(--sampling=sample with --temperature, --top_k, --top_p)"
            )
        if self.method == "sample" and not self.temperature > 0:
            raise UsageError(
                f"temperature {self.temperature} must be > 0 for sampling; for the most "
                "likely token use --sampling=greedy"
            )
        if not 0 <= self.top_k <= model_vocab:
            raise UsageError(f"top_k {self.top_k} must be in 0..{model_vocab} (0: no top-k cut)")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top_p {self.top_p} must be in (0, 1] (1: no nucleus cut)")
        return self


def top_k_mask(logits, k: int):
    """Logits outside each row's k largest set to a large negative number (ties at the k-th
    largest value are kept)."""
    kth = jax.lax.top_k(logits, k)[0][..., -1:]
    return jnp.where(logits < kth, _MASKED, logits)


def top_p_mask(logits, p: float):
    """Keeps each row's smallest set of largest logits whose softmax mass is at least p.

    A token is kept when the mass of the tokens strictly more likely than it is below p, so the
    most likely token is always kept; others are set to a large negative number.
    """
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    order = jnp.argsort(-logits, axis=-1)
    sorted_probs = jnp.take_along_axis(probs, order, axis=-1)
    before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
    # The smallest logit that is kept: the keep-set is a prefix of the descending order.
    kept = jnp.sum(before < p, axis=-1, keepdims=True)
    cutoff = jnp.take_along_axis(jnp.take_along_axis(logits, order, axis=-1), kept - 1, axis=-1)
    return jnp.where(logits < cutoff, _MASKED, logits)


def pick(logits, keys, sampling: Sampling):
    """Next token ids (batch,) from float logits (batch, vocab); keys: one PRNG key per row."""
    logits = logits.astype(jnp.float32)
    if sampling.vocab and sampling.vocab < logits.shape[-1]:
        logits = jnp.where(jnp.arange(logits.shape[-1]) < sampling.vocab, logits, _MASKED)
    if sampling.method == "greedy":
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    # As Pax (praxis.token_samplers.sample_from_top_k_and_top_p): top-k, then top-p among
    # those, both on the model's own probabilities; the temperature then reshapes the draw
    # among the tokens they keep.
    if sampling.top_k:
        logits = top_k_mask(logits, sampling.top_k)
    if sampling.top_p < 1:
        logits = top_p_mask(logits, sampling.top_p)
    return jax.vmap(jax.random.categorical)(keys, logits / sampling.temperature).astype(jnp.int32)
