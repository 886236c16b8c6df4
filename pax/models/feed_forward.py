"""The feed-forward layer: praxis's TransformerFeedForward (transformers.py)."""

import flax.linen as nn

from pax.models.base import Sharded

ACTIVATIONS = {"relu": nn.relu, "gelu": nn.gelu, "swiglu": nn.silu, "geglu": nn.gelu}
GATED = ("swiglu", "geglu")


class FeedForward(Sharded):
    """praxis TransformerFeedForward: [D, F] (+ bias), activation, [F, D] (+ bias); a gated
    activation (GATED) takes a second [D, F] input."""

    @nn.compact
    def __call__(self, x):
        c = self.cfg
        d, f = c.model_dims, c.hidden_dims
        act = ACTIVATIONS[c.activation]
        if c.activation in GATED:
            # praxis's gate is a second [D, F] layer: act(x W_gate + b_gate) * (x W_1 + b_1).
            h = self.project(
                "bte,egh->btgh",
                x,
                self.weight("wi", (d, 2, f), ("embed", None, "mlp"), (d, f)),
                "wi",
            )
            if c.ffn_has_bias:
                h = self.add_bias(h, self.bias("wi_bias", (2, f), (None, "mlp")))
            h = act(h[:, :, 0]) * h[:, :, 1]
        else:
            h = self.project(
                "bte,eh->bth", x, self.weight("wi", (d, f), ("embed", "mlp"), (d, f)), "wi"
            )
            if c.ffn_has_bias:
                h = self.add_bias(h, self.bias("wi_bias", (f,), ("mlp",)))
            h = act(h)
        h = self.constrain(h, ("batch", "length", "act_mlp"))
        out = self.project(
            "bth,he->bte", h, self.weight("wo", (f, d), ("mlp", "embed"), (f, d)), "wo"
        )
        if c.ffn_has_bias:
            out = self.add_bias(out, self.bias("wo_bias", (d,), ("embed",)))
        return out
