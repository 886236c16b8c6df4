"""Causal attention through the splash-attention kernel that ships inside jax (Pallas, TPU).

A flash-attention kernel: scores are made and consumed block by block in the core's vector
memory, never written to HBM, and Pax's attention logit cap is applied inside the kernel
(`attn_logits_soft_cap`). On a TPU its causal mask also skips the blocks above the diagonal.
Off TPU the same kernel runs in Pallas's interpreter, which is how the CPU tests check this
module against the XLA form in attention.py.

It masks by index (causal) and segment ids, where the XLA form masks by positions: the same
for training inputs, whose positions count up from each segment's start.
"""

import dataclasses

import jax
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.sharding import PartitionSpec as P

from pax.models import platform
from pax.parallel import sharding

# Lane width of the TPU's vector unit: a block of queries or keys is a multiple of it.
LANES = 128
# Block of queries and keys per kernel step, where the length allows: 512 keeps the matmul
# unit busy on v5e at head dims of 128 (benchmarks/tpu_bench.py measures the alternatives).
BLOCK = 512


def usable(length: int) -> bool:
    """Whether sequences of this length fit the kernel's blocks."""
    return length % LANES == 0


def resolve(setting: str, length: int, platform_name: str) -> str:
    """ATTENTION_KERNEL as a model of this length runs it on this platform: `auto` is splash on
    a TPU where the length fits the kernel's blocks, else xla."""
    if setting != "auto":
        return setting
    return "splash" if platform_name == "tpu" and usable(length) else "xla"


def _kernel(groups: int, length: int, cap: float, block: int, interpret: bool):
    """One kv head's kernel: `groups` query heads over one key and value head (MQA form)."""
    block = next(b for b in (block, 256, LANES) if length % b == 0 and b <= length)
    # Every tile, the forward pass's and both backward kernels', is `block` a side.
    fields = dataclasses.fields(splash.BlockSizes)
    sizes = splash.BlockSizes(**{f.name: block for f in fields if f.name.startswith("block_")})
    mask = splash.MultiHeadMask([splash.CausalMask((length, length))] * groups)
    # The kernel holds its mask's block tables as arrays, made concrete here. It is built
    # anew in each trace (its tables come from splash's own cache of processed masks): a
    # kernel kept from one trace and called in another leaked that trace's values on a TPU.
    with jax.ensure_compile_time_eval():
        return splash.make_splash_mqa_single_device(
            mask, block_sizes=sizes, attn_logits_soft_cap=cap or None, interpret=interpret
        )


def attend(q, k, v, segment_ids, cap: float, mesh=None, rules=sharding.LOGICAL_AXIS_RULES):
    """Causal softmax attention of scaled queries q (batch, t, group, kv_heads, dims) over k, v
    (batch, t, kv_heads, dims); with segment ids (batch, t), only within a query's segment.

    With a mesh, each device runs the kernel on its own batch rows and heads (shard_map): a
    Pallas kernel is opaque to XLA's partitioner, which would otherwise gather all of them.
    """
    b, t, g, n, d = q.shape
    kernel = _kernel(g, t, float(cap), BLOCK, platform.current(mesh) != "tpu")

    def local(q, k, v, segments):
        def one_head(q, k, v, ids):  # q (g, t, d), k and v (t, d), ids (t,)
            ids = None if ids is None else splash.SegmentIds(q=ids, kv=ids)
            return kernel(q, k, v, segment_ids=ids)

        over_heads = jax.vmap(one_head, in_axes=(0, 0, 0, None))
        return jax.vmap(over_heads)(q, k, v, segments)

    # Heads outermost, then the query group, length and dims: the kernel's layout.
    q = q.transpose(0, 3, 2, 1, 4)
    k, v = (a.transpose(0, 2, 1, 3) for a in (k, v))
    if mesh is not None and mesh.size > 1:

        def spec(names, a):
            return sharding.logical_sharding(names, a.shape, mesh, rules).spec

        q_spec = spec(("batch", "heads", None, "length", "kv"), q)
        kv_spec = spec(("batch", "heads", "length", "kv"), k)
        ids_spec = P() if segment_ids is None else spec(("batch", "length"), segment_ids)
        local = jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(q_spec, kv_spec, kv_spec, ids_spec),
            out_specs=q_spec,
            check_vma=False,
        )
    out = local(q, k, v, segment_ids)
    return out.transpose(0, 3, 2, 1, 4)
