"""The key/value cache for decoding: attention keys and values kept from one call to the next.

Decoding prefills the prompt in one call, then feeds one token per call. Each attention layer
keeps, in the `cache` variable collection, the keys and values of every token fed so far, each
slot's position and segment id, and a write index. A call writes its keys and values at the
index and attends over the whole cache with the model's one mask (causal by position, within a
segment), so cached decoding and a full recompute run the same attention code. Slots not yet
written carry segment id EMPTY, which no query has, so they are masked like another document's
tokens. Rotary keys are cached rotated (by their own positions); learned or sinusoidal position
embeddings are added to the inputs, which each call gets with its own positions.

The cache exists only while its collection is mutable in `apply` (never during `init`), so
training and evaluation never create one. Keys and values are laid out (batch, kv heads, length,
dims): each (row, head) is one contiguous [length, dims] matrix, the operand both attention dots
take as it is (a (batch, length, heads, dims) buffer made XLA:CPU transpose the whole cache into
that shape at every decode step). They are constrained by logical names like everything else:
batch over (`replica`, `data`), heads over `mdl`.
"""

import jax
import jax.numpy as jnp

COLLECTION = "cache"
EMPTY = -1  # the segment id of a slot nothing has been written to
KV_AXES = ("batch", "heads", "length", "kv")


def decoding(module) -> bool:
    """Whether `module` (inside a model) is being applied with a cache."""
    return module.is_mutable_collection(COLLECTION) and not module.is_initializing()


def default_segments(positions, segment_ids):
    """Unpacked inputs are one segment (id 1): the cache needs ids to tell written slots."""
    return jnp.ones(positions.shape, jnp.int32) if segment_ids is None else segment_ids


def extend(module, k, v, positions, segment_ids):
    """Writes this call's keys and values (batch, t, kv heads, dims) at the cache's index and
    returns the whole cache: (keys, values (batch, kv heads, length, dims), slot positions,
    slot segment ids).

    A call that finds no cache creates one at its input's length: `init` traces one call that
    way (abstractly) to learn the cache's structure for a given batch and length.
    """

    def variable(name, fill, shape, dtype):
        return module.variable(COLLECTION, name, jnp.full, shape, fill, dtype)

    k, v = k.swapaxes(1, 2), v.swapaxes(1, 2)  # this call's t tokens only: cheap
    keys = variable("key", 0, k.shape, k.dtype)
    values = variable("value", 0, v.shape, v.dtype)
    slot_positions = variable("positions", 0, positions.shape, jnp.int32)
    slot_segments = variable("segment_ids", EMPTY, positions.shape, jnp.int32)
    index = variable("index", 0, (), jnp.int32)
    at = index.value

    def write(buffer, new, axis):
        return jax.lax.dynamic_update_slice_in_dim(buffer, new.astype(buffer.dtype), at, axis)

    keys.value = module.constrain(write(keys.value, k, 2), KV_AXES)
    values.value = module.constrain(write(values.value, v, 2), KV_AXES)
    slot_positions.value = write(slot_positions.value, positions, 1)
    slot_segments.value = write(slot_segments.value, segment_ids, 1)
    index.value = at + positions.shape[1]
    return keys.value, values.value, slot_positions.value, slot_segments.value


def init(model, variables, batch: int, length: int):
    """An empty cache for `batch` rows of up to `length` tokens (call it under jit: it is made
    where it is used, sharded as the model constrains it)."""
    tokens = jnp.zeros((batch, length), jnp.int32)
    shapes = jax.eval_shape(
        lambda v: model.apply(v, tokens, mutable=[COLLECTION])[1][COLLECTION], variables
    )

    def empty(path, leaf):
        return jnp.full(leaf.shape, EMPTY if path[-1].key == "segment_ids" else 0, leaf.dtype)

    return jax.tree_util.tree_map_with_path(empty, shapes)
