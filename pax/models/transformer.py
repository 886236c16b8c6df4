"""Decoder-only Transformer LM (Flax linen): praxis's TransformerLm, assembled from its layers.

What each piece follows in praxis (google/praxis, praxis/layers), and where it lives here:
  embeddings        SharedEmbeddingSoftmax (embedding_softmax.py): one [vocab, D] table for
                    the lookup (times sqrt(D) with SCALE_SQRT_DEPTH) and the logits, plus a
                    vocab bias (its FeedForward's has_bias); SEPARATE_EMBEDDING: two tables
                    (this file)
  positions         PositionalEmbedding (sinusoids, added to the embeddings) or
                    TrainablePositionalEmbedding (a learned [TRAINABLE_PE_MAX_SEQ_LEN, D] table);
                    USE_ROTARY_POSITION_EMB: RotaryPositionalEmbedding on queries and keys
                    (positions.py; the learned table here)
  layer             Transformer with norm_policy 'pre' (transformers.py): x + attn(LN(x)), then
                    x + ffn(LN(x)) (Block, this file); LayerNorm (normalizations.py) keeps its
                    scale as an offset from 1, which is what weight decay then pulls towards
                    zero (base.py)
  attention         DotProductAttention (attentions.py): QKV projection, optional biases,
                    queries scaled by PerDimScale (or 1/sqrt(D / heads)), logits capped by
                    ATTEN_LOGIT_CAP, causal and segment masks, output projection (attention.py)
  feed-forward      TransformerFeedForward: [D, F] (+ bias), activation, [F, D] (+ bias)
                    (feed_forward.py)
  initialization    praxis's default Xavier (uniform, praxis's fan-in/out of each weight's
                    praxis shape) or a Gaussian (Pax's GPT-3 configs); the embedding table a
                    Gaussian of std EMBEDDING_INIT_STD (Pax's softmax_init) (base.py)
Layers are stacked with nn.scan (repeated layers) or unrolled, and rematerialized by a named
policy. The QKV projection is always one einsum over a fused weight (COMBINE_QKV only decides
the fans praxis would initialize with). Every parameter carries logical axis names; which mesh
axis each name lands on is decided by pax.parallel.sharding, never here. The XLA:CPU-tuned
forms of a few operations (CPU_KERNELS) are in kernels.py.
"""

from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from pax.experiments.config import ModelConfig
from pax.models import fp8, kv_cache
from pax.models.attention import Attention, soft_cap
from pax.models.base import Sharded, boxed
from pax.models.feed_forward import FeedForward
from pax.models.positions import sinusoids
from pax.parallel import pipeline

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    # praxis SAVE_DOT_FOR_MLPERF_200B: keep the QKV projection, the attention context and the
    # output projection (named with checkpoint_name in attention.py), recompute the rest.
    "save_dot_for_mlperf_200b": jax.checkpoint_policies.save_only_these_names(
        "combined_qkv_proj", "context", "out_proj"
    ),
}
# A padded id's logit: finite, so no inf - inf, and exp() of it is 0 in float32.
PADDING_LOGIT = -1e9


class Block(Sharded):
    """One pre-LN layer; (carry, positions, segment_ids) -> (carry, None) for nn.scan."""

    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        kw = dict(cfg=self.cfg, mesh=self.mesh, rules=self.rules)
        x = x + Attention(**kw, name="attention")(
            self.norm("pre_attention_norm")(x), positions, segment_ids
        )
        x = x + FeedForward(**kw, name="ffn")(self.norm("pre_ffn_norm")(x))
        return self.constrain(x), None


def stack_layers(kw: dict, num_layers: int, x, positions, segment_ids=None, initializing=False):
    """Adds `num_layers` Blocks to the calling (compact) module and runs x through them;
    `initializing`: the calling module's is_initializing()."""
    cfg = kw["cfg"]
    block = Block
    if cfg.remat_policy != "none":
        block = nn.remat(
            Block, policy=REMAT_POLICIES[cfg.remat_policy], prevent_cse=not cfg.use_repeated_layer
        )
    if cfg.use_repeated_layer:
        stack = nn.scan(
            block,
            # Each layer keeps its own slice of every per-layer collection: parameters, FP8
            # state, and while decoding its key/value cache.
            variable_axes={c: 0 for c in (*fp8.LAYER_COLLECTIONS, kv_cache.COLLECTION)},
            split_rngs={"params": True},
            in_axes=(nn.broadcast, nn.broadcast),
            length=num_layers,
            unroll=min(cfg.layer_scan_unroll, num_layers),
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        if jnp.dtype(cfg.fprop_dtype) != jnp.dtype(cfg.param_dtype) and not initializing:
            stack = nn.map_variables(stack, "params", _compute_dtype_matrices(cfg.fprop_dtype))
        x, _ = stack(**kw, name="layers")(x, positions, segment_ids)
    else:
        for i in range(num_layers):
            x, _ = block(**kw, name=f"layer_{i}")(x, positions, segment_ids)
    return x


def _compute_dtype_matrices(dtype):
    """The stacked layers' weight matrices in the compute dtype, cast before the scan slices them.

    Each layer casts its weights to the compute dtype anyway; cast inside the scan, the weights'
    gradients leave the backward loop as float32 stacks (the cast's transpose runs per layer),
    twice the bytes to write there and to read in the global norm and the optimizer. Cast here,
    they leave it in the compute dtype, the values the matmuls made, and become float32 in the
    passes that read them. Vectors (norm scales, biases, PerDimScale) keep their dtype: some
    are used in float32."""

    def cast(variables):
        return jax.tree.map(lambda p: p.astype(dtype) if p.ndim >= 3 else p, variables)

    return cast


class LayerStack(Sharded):
    """A run of layers as a module of its own: one pipeline stage."""

    num_layers: int = 1

    @nn.compact
    def __call__(self, x, positions, segment_ids=None):
        return stack_layers(
            dict(cfg=self.cfg, mesh=self.mesh, rules=self.rules),
            self.num_layers,
            x,
            positions,
            segment_ids,
            self.is_initializing(),
        )


class TransformerLm(Sharded):
    """num_stages > 1 splits the layers evenly into pipeline stages (pax.parallel.pipeline)."""

    num_stages: int = 1
    num_microbatches: int = 1

    @nn.compact
    def __call__(
        self, inputs, positions: Optional[jax.Array] = None, segment_ids: Optional[jax.Array] = None
    ):
        """Logits (batch, length, vocab) in float32 for int token ids (batch, length); with
        VOCAB_PAD_MULTIPLE, vocab is padded_vocab and the padded ids' logits PADDING_LOGIT."""
        c = self.cfg
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(inputs.shape[1]), inputs.shape)
        d, pdtype = c.model_dims, jnp.dtype(c.param_dtype)
        embedding_init = boxed(
            nn.initializers.normal(stddev=c.embedding_init_std), ("vocab", "embed")
        )
        vocab = padded_vocab(c)
        if c.separate_embedding:
            # praxis Embedding: the model's default initializer over [vocab, D].
            table = self.weight("embedding", (vocab, d), ("vocab", "embed"), (c.vocab_size, d))
        else:
            table = self.param("embedding", embedding_init, (vocab, d), pdtype)
        x = jnp.take(table, inputs, axis=0).astype(self.dtype)
        if c.scale_sqrt_depth:
            x = x * d**0.5
        if c.position_embedding == "sinusoidal":
            x = x + sinusoids(positions, d).astype(self.dtype)
        elif c.position_embedding == "learned":
            rows = c.trainable_pe_max_seq_len
            x = x + jnp.take(
                self.weight("position_embedding", (rows, d), (None, "embed"), (rows, d)),
                positions,
                axis=0,
            )
        x = self.constrain(x)

        kw = dict(cfg=c, mesh=self.mesh, rules=self.rules)
        if self.num_stages > 1:
            x = pipeline.Pipeline(
                LayerStack,
                dict(num_layers=c.num_layers // self.num_stages, **kw),
                self.num_stages,
                self.num_microbatches,
                collections=fp8.LAYER_COLLECTIONS,
                mesh=self.mesh,
                rules=self.rules,
                name="pipeline",
            )(x, positions, segment_ids)
        else:
            x = stack_layers(kw, c.num_layers, x, positions, segment_ids, self.is_initializing())

        x = self.norm("final_norm")(x)
        if c.separate_embedding:
            # praxis FullSoftmax: its own [D, vocab] weight, Pax's softmax_init.
            gaussian = nn.initializers.normal(stddev=c.embedding_init_std)
            softmax = self.param(
                "softmax", boxed(gaussian, ("embed", "vocab")), (d, vocab), pdtype
            ).astype(self.dtype)
            logits = jnp.einsum("bte,ev->btv", x, softmax)
        else:
            # The barrier's transpose ties the two cotangents: the table's gradient from the
            # logits is computed with the hidden states', before the layers' backward pass.
            # Otherwise XLA adds it to the lookup's scatter-add after that pass and, to free the
            # memory meanwhile, runs the output projection a second time.
            x, table = jax.lax.optimization_barrier((x, table.astype(self.dtype)))
            logits = jnp.einsum("bte,ve->btv", x, table)
        if c.softmax_has_bias:
            logits = logits + self.bias("softmax_bias", (vocab,), ("vocab",))
        logits = self.constrain(logits, ("batch", "length", "act_vocab"))
        logits = soft_cap(logits.astype(jnp.float32), c.softmax_cap)
        if vocab > c.vocab_size:
            # Padding ids (VOCAB_PAD_MULTIPLE) get no probability: no loss, gradient or sample.
            logits = jnp.where(jnp.arange(vocab) < c.vocab_size, logits, PADDING_LOGIT)
        return logits


def padded_vocab(cfg: ModelConfig) -> int:
    """The tables' rows: VOCAB_SIZE rounded up to a multiple of VOCAB_PAD_MULTIPLE."""
    return -(-cfg.vocab_size // cfg.vocab_pad_multiple) * cfg.vocab_pad_multiple


def padding_params(cfg: ModelConfig) -> int:
    """How many stored numbers the vocabulary padding adds: rows of each table and the bias."""
    pad = padded_vocab(cfg) - cfg.vocab_size
    tables = 2 if cfg.separate_embedding else 1
    return pad * (tables * cfg.model_dims + (1 if cfg.softmax_has_bias else 0))


def cross_entropy(logits, targets):
    """optax.softmax_cross_entropy_with_integer_labels: logsumexp minus the target's logit. The
    target's logit is picked by a masked sum, which XLA fuses into the logsumexp's pass over the
    logits; a gather would have the float32 logits written out whole, to read one of each row."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    is_target = jnp.arange(logits.shape[-1]) == targets[..., None]
    return lse - jnp.sum(jnp.where(is_target, logits, 0.0), axis=-1)


def lm_loss(logits, targets, weights):
    """Weighted token cross-entropy and Pax's LM metrics.

    Returns (loss, metrics) where loss = log_pplx = the weighted mean negative log-likelihood,
    accuracy = weighted next-token accuracy, num_tokens = sum of weights.
    """
    nll = cross_entropy(logits, targets)
    weights = weights.astype(jnp.float32)
    num_tokens = weights.sum()
    denom = jnp.maximum(num_tokens, 1.0)
    loss = (nll * weights).sum() / denom
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    metrics = {
        "loss": loss,
        "log_pplx": loss,
        "accuracy": (correct * weights).sum() / denom,
        "num_tokens": num_tokens,
    }
    return loss, metrics
