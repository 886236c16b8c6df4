"""The independent baseline: a plain Flax + optax LM written for this benchmark alone.

It imports nothing from pax, so `./noxw -s bench` can tell the cost of the project's model from
the cost of the same math written the usual way: pre-LN blocks, one fused QKV Dense, causal
attention, GELU FFN, the embedding table reused as the output projection, the experiment's
optimizer from optax's pieces (`optimizer`), one jax.jit with donated state. Attention is einsum
under a causal mask (`xla`), or jax's splash kernel (`splash`: Pallas, compiled on a TPU and
interpreted elsewhere) called as MaxText calls it (MaxText/layers/attention_op.py:
make_splash_mha over a causal mask per head, 512-square blocks), so the accelerator bench
compares trainer and baseline at the same kernel. Its matmuls are the ones pax.train.mfu counts
(tests/benchmarks/test_bench.py counts them in both programs); what that formula leaves out
differs: learned positions here (the trainer: rotary). The experiment's soft caps on attention
and output logits (cap * tanh(logits / cap)) are applied as jnp writes them, and passed to the
splash kernel as its own soft cap.
"""

import dataclasses
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.experimental.pallas.ops.tpu import splash_attention as splash

# Which intermediate values a rematerialized block keeps (jax's policies): "full" keeps none.
REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class Shape:
    vocab: int
    layers: int
    dims: int
    hidden: int
    heads: int
    seq: int
    dtype: str = "float32"  # activations; parameters and logits stay float32
    remat: str = "none"  # what each block keeps for the backward pass: REMAT_POLICIES
    attention: str = "xla"  # ATTENTION: the causal attention's kernel
    attention_cap: float = 0.0  # soft cap on attention logits; 0: none
    output_cap: float = 0.0  # soft cap on the output logits; 0: none


def soft_cap(x, cap: float):
    return cap * jnp.tanh(x / cap) if cap > 0 else x


ATTENTION = ("xla", "splash")
SPLASH_BLOCK = 512  # MaxText's default sa_block_* sizes


def splash_causal(q, k, v, cap: float = 0.0):
    """Causal attention of scaled queries q over k, v (batch, length, heads, dims) in jax's
    splash kernel, one batch row at a time (vmap), every block size SPLASH_BLOCK or the length,
    logits soft-capped at cap (none at 0)."""
    _, t, h, _ = q.shape
    block = min(SPLASH_BLOCK, t)
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    # Built in the trace that calls it: the kernel holds its mask's block tables as arrays.
    with jax.ensure_compile_time_eval():
        kernel = splash.make_splash_mha(
            splash.MultiHeadMask([splash.CausalMask((t, t))] * h),
            head_shards=1,
            q_seq_shards=1,
            block_sizes=sizes,
            attn_logits_soft_cap=cap or None,
            interpret=jax.default_backend() != "tpu",
        )
    out = jax.vmap(kernel)(*(a.transpose(0, 2, 1, 3) for a in (q, k, v)))
    return out.transpose(0, 2, 1, 3)


class Block(nn.Module):
    s: Shape

    @nn.compact
    def __call__(self, x):
        s, dt = self.s, jnp.dtype(self.s.dtype)
        b, t, _ = x.shape
        d = s.dims // s.heads
        qkv = nn.Dense(3 * s.dims, use_bias=False, dtype=dt)(nn.LayerNorm(dtype=dt)(x))
        q, k, v = jnp.split(qkv.reshape(b, t, 3 * s.heads, d), 3, axis=2)
        if s.attention == "splash":
            q = q * jnp.asarray(d**-0.5, dt)
            out = splash_causal(q, k, v, s.attention_cap).reshape(b, t, s.dims)
        else:
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * d**-0.5
            logits = soft_cap(logits, s.attention_cap)
            logits = jnp.where(jnp.tril(jnp.ones((t, t), bool)), logits, -1e30)
            probs = jax.nn.softmax(logits, axis=-1).astype(dt)
            out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, s.dims)
        x = x + nn.Dense(s.dims, use_bias=False, dtype=dt)(out)
        h = nn.gelu(nn.Dense(s.hidden, use_bias=False, dtype=dt)(nn.LayerNorm(dtype=dt)(x)))
        return x + nn.Dense(s.dims, use_bias=False, dtype=dt)(h)


class Lm(nn.Module):
    s: Shape

    @nn.compact
    def __call__(self, tokens):
        s, dt = self.s, jnp.dtype(self.s.dtype)
        # Rows of norm ~1, so the tied output projection starts with logits of order 1.
        init = nn.initializers.normal(s.dims**-0.5)
        embed = nn.Embed(s.vocab, s.dims, dtype=dt, embedding_init=init)
        positions = self.param("positions", nn.initializers.normal(0.02), (s.seq, s.dims))
        x = embed(tokens) + positions[: tokens.shape[1]].astype(dt)
        block = Block
        if s.remat != "none":
            block = nn.remat(Block, policy=REMAT_POLICIES[s.remat])
        for _ in range(s.layers):
            x = block(s)(x)
        logits = embed.attend(nn.LayerNorm(dtype=dt)(x)).astype(jnp.float32)
        return soft_cap(logits, s.output_cap)


def optimizer(
    learning_rate=1e-3,
    clip=5.0,
    weight_decay=1e-3,
    update_rms_cap=0.0,
    b1=0.9,
    b2=0.99,
    eps=1e-6,
    eps_root=0.0,
):
    """optax.adamw (decay on every tensor, a constant learning rate) after a global-norm clip
    (none where clip <= 0).

    update_rms_cap > 0 also caps each tensor's Adam update to that RMS before the decay
    (optax.clip_by_block_rms), which is Adam as praxis's sharded_adam defines it: a reduction
    over every tensor's update before any of it can be applied, so the two loops of a bench
    pay for the same math."""
    return optax.chain(
        *([optax.clip_by_global_norm(clip)] if clip > 0 else []),
        optax.scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
        *([optax.clip_by_block_rms(update_rms_cap)] if update_rms_cap > 0 else []),
        optax.add_decayed_weights(weight_decay),
        optax.scale_by_learning_rate(learning_rate),
    )


class Baseline:
    """Initialized on construction; the first `interval` call also compiles the step.
    Keyword arguments are `optimizer`'s."""

    def __init__(self, s: Shape, batches, **optimizer_args):
        model = Lm(s)
        tx = optimizer(**optimizer_args)

        def step(params, opt_state, batch):
            def loss_fn(p):
                logits = model.apply({"params": p}, batch["inputs"])
                nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"])
                w = batch["weights"].astype(jnp.float32)
                return (nll * w).sum() / jnp.maximum(w.sum(), 1.0)

            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        self.batches = [jax.device_put({k: jnp.asarray(v) for k, v in b.items()}) for b in batches]
        self.params = jax.jit(model.init)(jax.random.key(0), self.batches[0]["inputs"])["params"]
        self.opt_state = tx.init(self.params)
        self.step = jax.jit(step, donate_argnums=(0, 1))
        self.i = 0

    def interval(self, steps: int) -> float:
        """Seconds per step over `steps` steps, all dispatched before one wait."""
        start = time.perf_counter()
        for _ in range(steps):
            batch = self.batches[self.i % len(self.batches)]
            self.params, self.opt_state, self.loss = self.step(self.params, self.opt_state, batch)
            self.i += 1
        self.loss.block_until_ready()
        return (time.perf_counter() - start) / steps
