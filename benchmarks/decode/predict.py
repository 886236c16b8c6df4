"""The predicted speed-ups of the KV cache over recomputing: by FLOPs, and by the roofline
(each step at least max(FLOPs / peak, bytes / bandwidth))."""

from benchmarks.decode.recompute import bucket
from benchmarks.decode.sizes import step_bytes
from pax.train import mfu


def _forward_flops(cfg, tokens: int, span: int) -> float:
    """Forward FLOPs of `tokens` tokens each attending over `span` slots."""
    return tokens * mfu.flops_per_token(cfg, span) / 3.0  # flops_per_token counts training: 3x


def roofline_seconds(flops: float, nbytes: float, peak: float, bandwidth: float) -> float:
    return max(flops / peak, nbytes / bandwidth)


def predicted_roofline(
    cfg, batch: int, prompt_bucket: int, new: int, peak: float, bandwidth: float
) -> dict:
    """Roofline times of both ways of generating `new` tokens: the sum over their steps of
    max(FLOPs / peak, bytes / bandwidth)."""
    span = prompt_bucket + new

    def seconds(tokens, attended, length, cache_span=0):
        flops = _forward_flops(cfg, batch * tokens, attended)
        return roofline_seconds(flops, step_bytes(cfg, batch, length, cache_span), peak, bandwidth)

    cached = seconds(prompt_bucket, span, prompt_bucket, span)  # prefill
    cached += (new - 1) * seconds(1, span, 1, span)
    recompute = 0.0
    for i in range(new):
        length = bucket(prompt_bucket + i)
        recompute += seconds(length, length, length)
    return {
        "cached_roofline_s": cached,
        "recompute_roofline_s": recompute,
        "roofline_speedup": recompute / cached,
    }


def predicted_speedup(cfg, batch: int, prompt_bucket: int, new: int) -> dict:
    """FLOPs of both ways of generating `new` tokens after prompts padded to prompt_bucket."""
    span = prompt_bucket + new  # the cache buffer every cached token attends over
    cached = _forward_flops(cfg, batch * prompt_bucket, span)  # prefill
    cached += (new - 1) * _forward_flops(cfg, batch, span)  # one token per row per step
    recompute = sum(
        _forward_flops(cfg, batch * bucket(prompt_bucket + i), bucket(prompt_bucket + i))
        for i in range(new)
    )
    return {"cached_flops": cached, "recompute_flops": recompute, "speedup": recompute / cached}
