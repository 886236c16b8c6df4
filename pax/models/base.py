"""What the layers share: a module base (config, dtype, sharding by logical names, praxis's
initializers, the CPU-kernel switch) and praxis's LayerNorm."""

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from pax.experiments.config import ModelConfig
from pax.models import fp8, kernels, platform, splash
from pax.parallel import sharding

ACT_AXES = ("batch", "length", "act_embed")


def xavier(fan_in: int, fan_out: int, scale: float):
    """praxis WeightInit.Xavier: uniform in ±scale * sqrt(6 / (fan_in + fan_out))."""
    limit = scale * math.sqrt(6.0 / (fan_in + fan_out))

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -limit, limit)

    return init


def boxed(init, names: tuple):
    return nn.with_logical_partitioning(init, names)


class Sharded(nn.Module):
    """What every layer shares: the config, its activations' dtype, sharding constraints by
    logical names, praxis's initializers, and the switch to the CPU-tuned kernels."""

    cfg: ModelConfig
    mesh: Any = None
    rules: tuple = sharding.LOGICAL_AXIS_RULES

    @property
    def dtype(self):
        return jnp.dtype(self.cfg.fprop_dtype)

    @property
    def cpu_kernels(self) -> bool:
        """Whether to use the XLA:CPU-tuned forms of pax.models.kernels (CPU_KERNELS):
        weight_einsum's and add_bias's custom gradients, rotary's sin/cos table. Nothing shows
        they help on TPU or GPU, where weight_einsum's merged batch axes may also cross a
        sharded one; so `auto` keeps them to CPU."""
        kernels = self.cfg.cpu_kernels
        return platform.current(self.mesh) == "cpu" if kernels == "auto" else kernels == "on"

    @property
    def capped_softmax(self) -> bool:
        """Whether XLA attention's softmax of capped logits is kernels.capped_softmax: unless
        CPU_KERNELS=off, on every platform. Its backward starts from the raw logits and the
        probabilities; compiled for a TPU or a GPU, autodiff's form keeps more scores-sized
        tensors alive in each layer's backward (docs/benchmarks.md)."""
        return self.cfg.cpu_kernels != "off"

    @property
    def splash_attention(self) -> bool:
        """Whether attention runs in jax's splash kernel (ATTENTION_KERNEL; pax.models.splash):
        `auto` where the backend is TPU and the sequence fits its blocks. A call on a length
        that does not fit them (a short input to init) runs the XLA form (attention.py)."""
        c = self.cfg
        kernel = splash.resolve(c.attention_kernel, c.seq_len, platform.current(self.mesh))
        return kernel == "splash"

    def add_bias(self, y, b):
        return kernels.add_bias(y, b) if self.cpu_kernels else y + b

    def constrain(self, x, names=ACT_AXES):
        if self.mesh is None:
            return x
        return jax.lax.with_sharding_constraint(
            x, sharding.logical_sharding(names, x.shape, self.mesh, self.rules)
        )

    def norm(self, name: str):
        return LayerNorm(self.cfg, name=name)

    def weight(self, name: str, shape: tuple, names: tuple, fans: tuple):
        """A weight matrix initialized as praxis would: `fans` are the (fan_in, fan_out) praxis
        computes for its own shape of this weight (base_layer.get_fan_in_fan_out)."""
        c = self.cfg
        if c.weight_init == "xavier":
            init = xavier(*fans, c.weight_init_scale)
        else:
            init = nn.initializers.normal(stddev=c.weight_init_scale)
        return self.param(name, boxed(init, names), shape, jnp.dtype(c.param_dtype)).astype(
            self.dtype
        )

    def bias(self, name: str, shape: tuple, names: tuple):
        """A bias (praxis: constant 0 at init)."""
        b = self.param(
            name, boxed(nn.initializers.zeros, names), shape, jnp.dtype(self.cfg.param_dtype)
        )
        return b.astype(self.dtype)

    def project(self, eqn: str, x, w, name: str):
        """A weight matmul; FP8 (pax.models.fp8) with USE_FP8, its scales under `name`_fp8."""
        if self.cfg.use_fp8:
            return fp8.einsum(f"{name}_fp8", eqn, x, w)
        return kernels.weight_einsum(eqn, x, w) if self.cpu_kernels else jnp.einsum(eqn, x, w)


class LayerNorm(nn.Module):
    """praxis LayerNorm: (x - mean) / sqrt(var + eps) * (1 + scale) + bias, the scale stored as
    its offset from 1 (initialized to 0). Statistics in float32, whatever the activations' dtype."""

    cfg: ModelConfig

    @nn.compact
    def __call__(self, x):
        c = self.cfg
        dims, dtype = x.shape[-1], jnp.dtype(c.param_dtype)
        scale = self.param("scale", boxed(nn.initializers.zeros, ("embed",)), (dims,), dtype)
        bias = self.param("bias", boxed(nn.initializers.zeros, ("embed",)), (dims,), dtype)
        y = x.astype(jnp.float32)
        mean = jnp.mean(y, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(y - mean), axis=-1, keepdims=True)
        y = (y - mean) * jax.lax.rsqrt(var + c.layernorm_epsilon)
        return (y * (1.0 + scale) + bias).astype(x.dtype)
