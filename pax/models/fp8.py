"""FP8 matmuls with delayed scaling (flax's fp8 ops) and the state they carry.

With USE_FP8 the attention projections and the FFN matmuls run as flax `Fp8Einsum`s: inputs and
kernels are quantized to e4m3 in the forward pass and output gradients to e5m2 in the backward
pass, each by a scale derived from a history of absolute maxima (delayed scaling: a step uses
the scale its predecessors' amaxes imply). On Hopper, XLA rewrites each quantize → dot →
dequantize into one cuBLASLt FP8 GEMM; other backends emulate FP8.

The scales and amax histories are variables of the `_overwrite_with_gradient` collection (OWG):
the backward pass returns their next values as their "gradients", and the train step stores
those in place of the old ones. They never reach the optimizer, so no Adam moments, weight
decay or gradient clipping apply to them.
"""

import jax
import jax.numpy as jnp
from flax.linen import fp8_ops

OWG = fp8_ops.OVERWRITE_WITH_GRADIENT

# Every variable collection a layer holds. Whatever stacks layers (nn.scan over repeated
# layers, a pipeline's vmap over stages) stacks all of them the same way, so each layer keeps
# its own scales.
LAYER_COLLECTIONS = ("params", OWG)


def einsum(name: str, eqn: str, x, w):
    """The FP8 einsum(eqn, x, w), its OWG state under `name`.

    Call it from inside a compact module (the FP8 einsum is a submodule).
    """
    return fp8_ops.Fp8Einsum(name=name)(eqn, x, w)


def for_differentiation(owg):
    """OWG state in fp8_ops' max-combining dtype for the forward/backward pass.

    A variable used more than once in a step (a stage's layers over a pipeline's microbatches)
    gets one cotangent per use; in this dtype autodiff combines them by max, not sum, which is
    what an amax or a scale needs.
    """
    return jax.tree.map(lambda a: jax.lax.convert_element_type(a, fp8_ops.fp32_max_grad), owg)


def overwrite(owg, owg_grads, keep_old):
    """The next OWG state: the backward pass's values in f32, or the old state where keep_old
    (a skipped step must not feed a non-finite amax into the histories)."""
    return jax.tree.map(
        lambda old, new: jnp.where(keep_old, old, jax.lax.convert_element_type(new, jnp.float32)),
        owg,
        owg_grads,
    )
