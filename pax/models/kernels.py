"""Forms of operations with custom gradients, which the layers use where CPU_KERNELS says so.

Each computes what its plain jnp form computes; they were chosen from XLA:CPU profiles. Their
custom VJPs rule out forward-mode autodiff (jax.jvp, jax.linearize). By default (`auto`) the
capped softmax is used on every platform, where TPU compiles showed it pays too
(pax.models.base.Sharded.capped_softmax), and the others only on a CPU backend, where nothing
shows they help on TPU or GPU (Sharded.cpu_kernels). The bench (benchmarks/) prints what they
are worth.
"""

import functools
import itertools

import jax
import jax.numpy as jnp

# Capped logits lie in (-cap, cap): up to this cap, exp of them cannot overflow float32 (e^64 is
# 6e27) nor underflow to zero (e^-64 is 2e-28), so their softmax needs no max subtracted.
CAP_WITHOUT_MAX = 64.0


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def capped_softmax(logits, mask, cap: float):
    """softmax(where(mask, cap * tanh(logits / cap), -inf)) over the last axis, in float32, for
    0 < cap <= CAP_WITHOUT_MAX; a row with nothing unmasked is all zeros.

    Autodiff's form takes four passes over the scores, the largest tensors of a layer: the
    capped logits written out (tanh's derivative wants them), their max, the exponentials and
    their sum, the quotient. Bounded logits need no max; keeping the logits rather than the
    capped ones lets XLA fuse the cap into the exponential, and its derivative into the
    softmax's backward.
    """
    return _capped_softmax_fwd(logits, mask, cap)[0]


def _capped_softmax_fwd(logits, mask, cap):
    e = jnp.where(mask, jnp.exp(cap * jnp.tanh(logits / cap)), 0.0)
    probs = e / jnp.maximum(jnp.sum(e, axis=-1, keepdims=True), jnp.finfo(jnp.float32).tiny)
    return probs, (logits, probs)


def _capped_softmax_bwd(cap, residuals, dprobs):
    logits, probs = residuals
    dcapped = probs * (dprobs - jnp.sum(dprobs * probs, axis=-1, keepdims=True))
    return dcapped * (1.0 - jnp.square(jnp.tanh(logits / cap))), None


capped_softmax.defvjp(_capped_softmax_fwd, _capped_softmax_bwd)


ROTARY_TABLE_SCOPE = "rotary_sin_cos"


def sin_cos_table(angle):
    """sin(angle) and cos(angle), each computed once.

    XLA counts sin and cos as cheap and fuses them into every use, here one per head and half
    of every query and key. A product with the identity (exact at "highest" precision) is a
    matmul, which XLA does not fuse, so each is computed once. Not model FLOPs: MFU's count
    leaves this scope out.
    """
    with jax.named_scope(ROTARY_TABLE_SCOPE):
        identity = jnp.eye(angle.shape[-1], dtype=jnp.float32)
        return tuple(
            jnp.matmul(f(angle), identity, precision="highest") for f in (jnp.sin, jnp.cos)
        )


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def weight_einsum(eqn: str, x, w):
    """jnp.einsum(eqn, x, w) for an activation x and a weight w, with the weight gradient
    written as einsum(x, dy) rather than autodiff's einsum(dy, x).

    The order decides which operand XLA transposes to put the contracted (batch, length) axes
    where its matmul wants them: x, a stored activation, is then a plain copy; dy is the end
    of an elementwise chain (the activation's derivative, the residual stream's LayerNorm
    backward, growing layer by layer), which XLA:CPU fuses into the transposing copy,
    recomputing it there.
    """
    return jnp.einsum(eqn, x, w)


def _weight_einsum_fwd(eqn, x, w):
    return jnp.einsum(eqn, x, w), (x, w)


def _weight_einsum_bwd(eqn, residuals, dy):
    x, w = residuals
    ins, out = eqn.split("->")
    x_axes, w_axes = ins.split(",")
    dx = jnp.einsum(f"{out},{w_axes}->{x_axes}", dy, w)
    if x.dtype != jnp.float32:
        # In bfloat16 the merged form below is converted to float32 for a generic dot; this
        # 3-D one stays a bfloat16 matmul.
        return dx.astype(x.dtype), jnp.einsum(f"{x_axes},{out}->{w_axes}", x, dy).astype(w.dtype)
    # The axes dW contracts lead both x and dy (batch, length); merged into one, they make a
    # 2-D matmul that XLA:CPU reads x for transposed in place. Left 3-D, it copies x transposed
    # first, recomputing x's producer (the feed-forward's activation) there.
    shared = itertools.takewhile(lambda a: a[0] == a[1] and a[0] not in w_axes, zip(x_axes, out))
    lead = len(list(shared))
    dw = jnp.einsum(
        f"z{x_axes[lead:]},z{out[lead:]}->{w_axes}",
        x.reshape(-1, *x.shape[lead:]),
        dy.reshape(-1, *dy.shape[lead:]),
    )
    return dx.astype(x.dtype), dw.astype(w.dtype)


weight_einsum.defvjp(_weight_einsum_fwd, _weight_einsum_bwd)


@jax.custom_vjp
def add_bias(y, b):
    """y + b over y's leading (batch, length) axes, b's gradient summed in float32.

    Autodiff sums a bf16 gradient in bf16, which XLA:CPU runs as a float32 copy of dy cut into
    windows (reduce-window), far slower than a float32-accumulating sum; float32 accumulation
    is also the more accurate of the two.
    """
    return y + b


def _add_bias_fwd(y, b):
    return y + b, None


def _add_bias_bwd(_, dy):
    db = jnp.sum(dy, axis=(0, 1), dtype=jnp.float32)
    return dy, db.astype(dy.dtype)


add_bias.defvjp(_add_bias_fwd, _add_bias_bwd)
