"""The decode modes' flags (pax.main --mode=decode_once | decode) and what they resolve to."""

import dataclasses
from typing import Optional

from absl import flags

from pax.decode.sampling import SAMPLINGS, Sampling

_PROMPT = flags.DEFINE_multi_string(
    "prompt", [], "Decode modes: a prompt to continue (repeatable)."
)
_PROMPTS = flags.DEFINE_string(
    "prompts",
    None,
    'Decode modes: a file of prompts, one a line (a .jsonl file: one {"prompt": ...} a line). '
    "Without --prompt or --prompts, prompts come from the experiment's eval split.",
)
_NUM_PROMPTS = flags.DEFINE_integer(
    "num_prompts", 4, "Decode modes: prompts drawn from the eval split (without --prompt(s))."
)
_PROMPT_TOKENS = flags.DEFINE_integer(
    "prompt_tokens",
    32,
    "Decode modes: about this many tokens per prompt drawn from the eval split.",
)
_MAX_NEW_TOKENS = flags.DEFINE_integer(
    "max_new_tokens", 64, "Decode modes: tokens to generate per prompt (at most)."
)
_SAMPLING = flags.DEFINE_enum(
    "sampling",
    "greedy",
    list(SAMPLINGS),
    "Decode modes: greedy (the most likely token) or sample (with --temperature, --top_k, --top_p).",
)
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Sampling temperature (> 0).")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Sample among the k most likely tokens; 0: all.")
_TOP_P = flags.DEFINE_float(
    "top_p", 1.0, "Sample among the most likely tokens whose probabilities add up to p; 1: all."
)
_SEED = flags.DEFINE_integer(
    "decode_seed", 1234, "Sampling seed; each prompt draws from its own stream of it."
)
_BATCH = flags.DEFINE_integer("decode_batch_size", 8, "Decode modes: prompts decoded together.")
_NO_EOS = flags.DEFINE_bool(
    "ignore_eos", False, "Decode modes: keep generating after the end-of-sequence token."
)
_POLL = flags.DEFINE_float(
    "decode_poll_s", 60.0, "--mode=decode: seconds between looks for a new checkpoint."
)
_WAIT = flags.DEFINE_float(
    "decode_wait_s",
    0.0,
    "--mode=decode: give up after this many seconds without a new checkpoint; 0: wait on.",
)


@dataclasses.dataclass(frozen=True)
class Options:
    prompts: tuple = ()  # texts given on the command line
    prompts_file: Optional[str] = None
    num_prompts: int = 4
    prompt_tokens: int = 32
    max_new_tokens: int = 64
    sampling: Sampling = Sampling()
    seed: int = 1234
    batch_size: int = 8
    stop_at_eos: bool = True
    poll_s: float = 60.0
    wait_s: float = 0.0


def from_flags() -> Options:
    return Options(
        prompts=tuple(_PROMPT.value),
        prompts_file=_PROMPTS.value,
        num_prompts=_NUM_PROMPTS.value,
        prompt_tokens=_PROMPT_TOKENS.value,
        max_new_tokens=_MAX_NEW_TOKENS.value,
        sampling=Sampling(_SAMPLING.value, _TEMPERATURE.value, _TOP_K.value, _TOP_P.value),
        seed=_SEED.value,
        batch_size=_BATCH.value,
        stop_at_eos=not _NO_EOS.value,
        poll_s=_POLL.value,
        wait_s=_WAIT.value,
    )
