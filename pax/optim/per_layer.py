"""Optimizer updates per layer for stacked parameters.

With USE_REPEATED_LAYER each layer's weights are one leaf [layers, ...] (in a pipeline
[stage, layers, ...]). praxis treats such a leaf as that many separate variables: its learner
wraps the optimizer in get_transformations_with_vectorized_repeat_prefix
(praxis/optimizer_prefix_vectorization.py, called from learners.Learner.get_grad_tx), which
vmaps the optimizer over each variable's repeat prefix. The learner's global-norm gradient
clipping (Learner.scale_gradients) stays outside, over all variables at once.

Only the parts of an optimizer that look at a whole tensor change under that vmap: the update
capping (an RMS over the tensor), a rank test deciding which tensors decay, Adafactor's choice
to factor. So exactly those are vmapped here, per leaf, over its prefix, and everything
elementwise runs on the stacked leaf as it is. Unlike praxis's grouping (one optimizer state
per prefix shape, each with its own step count), the state keeps the layout of the
unvectorized optimizer, so Adam's checkpoints of either layout stay loadable.

`prefix` below is a tree shaped like the parameters holding each leaf's number of leading
stacked dimensions (pax.train.state.repeat_prefix reads them off the logical axis names), or
None where nothing is stacked.
"""

from typing import Any, Optional

import jax
import optax

Prefix = Optional[Any]  # a tree of ints shaped like the parameters, or None


def vmap_prefix(fn, num_dims: int):
    """fn vmapped over `num_dims` leading axes of every argument (praxis
    optimizer_prefix_vectorization._vectorize_on_prefix_dims)."""
    for _ in range(num_dims):
        fn = jax.vmap(fn)
    return fn


def prefixes(tree, prefix: Prefix):
    """Each leaf's number of stacked dimensions, as a tree shaped like `tree`. A tree without
    leaves passes through: optax.tree_map_params calls init with one (leafless) placeholder in
    place of the parameters, to find which parts of the state are parameter-shaped."""
    if prefix is None or not jax.tree.leaves(tree):
        return jax.tree.map(lambda _: 0, tree)
    return prefix


def clip_by_block_rms(threshold: float, prefix: Prefix) -> optax.GradientTransformation:
    """optax.clip_by_block_rms (praxis sharded_adam's clip_update, ShardedAdafactor's update
    clipping) applied to each layer of a stacked leaf on its own."""
    inner = optax.clip_by_block_rms(threshold)

    def update(updates, state, params=None):
        del params

        def one(u, k):
            return vmap_prefix(lambda x: inner.update(x, inner.init(x))[0], k)(u)

        return jax.tree.map(one, updates, prefixes(updates, prefix)), state

    return optax.GradientTransformation(inner.init, update)


def matrices_only(prefix: Prefix):
    """A decay mask: True for a tensor that is a matrix (or more) per layer; norm scales and
    biases, stacked or not, are left out."""

    def mask(params):
        return jax.tree.map(lambda p, k: p.ndim - k >= 2, params, prefixes(params, prefix))

    return mask
