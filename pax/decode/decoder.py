"""--mode=decode_once and --mode=decode: continuations of prompts from a run's checkpoints.

decode_once decodes the newest checkpoint and prints the continuations; decode follows a
training run as Pax's decoder job does: it decodes the newest checkpoint, waits for a newer
one, decodes that, and stops after the checkpoint of the last training step. Both write one
JSON line per prompt to Pax's place for decoder outputs,

    <job_dir>/decoder_out/<input name>/decoder_out_<step>_shard_<process>.jsonl

(input name: the eval split's data source, or `prompts` for --prompt/--prompts), written under
a temporary name and renamed, so a file there is complete. --mode=decode skips steps whose file
exists, so a restarted decoder picks up where it stopped.

Checkpoints are only read, never moved, as the trainer owns the directory: one whose files differ
from the sha256 recorded when it was written is refused (an error naming it and the fix); one that
does not read back otherwise (the trainer's retention may delete one while it is read) is skipped.
"""

import dataclasses
import json
import os
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from flax import serialization

from pax.checkpoint.flax_file import FlaxFileCheckpointer
from pax.checkpoint.manager import (
    SET_ASIDE_DIR,
    CheckpointDamaged,
    CheckpointError,
    check_compatible,
    checked,
    step_name,
)
from pax.data import tokenizers
from pax.decode import prompts as prompts_lib
from pax.decode.generate import Generator, decode_model, unscan, unstage
from pax.decode.options import Options
from pax.errors import UsageError
from pax.train import placement
from pax.train import state as state_lib

OUT_DIR = "decoder_out"
# Model settings that change memory or speed, not the parameters or what they compute.
_SAME_FUNCTION = ("remat_policy", "attention_query_chunk", "cpu_kernels", "attention_kernel")


class NoNewCheckpoint(CheckpointError):
    """--mode=decode waited longer than --decode_wait_s for a new checkpoint."""


def output_path(job_dir: str, name: str, step: int) -> str:
    return os.path.join(
        job_dir, OUT_DIR, name, f"decoder_out_{step}_shard_{jax.process_index()}.jsonl"
    )


class Decoder:
    """Everything that does not change from one checkpoint to the next, checked up front."""

    def __init__(self, run, job_dir: str, options: Options, need_checkpoint: bool = False):
        """need_checkpoint: a job directory without a checkpoint is a usage error (decode_once;
        --mode=decode waits for one instead)."""
        self.run, self.job_dir, self.options = run, job_dir, options
        cfg = run.task.model
        train_data = next(d for d in run.datasets if d.is_training)
        self.tokenizer = tokenizers.build(train_data.tokenizer_path)
        _check_against_job(job_dir, run, train_data.tokenizer_path)
        self.sampling = self._checked_sampling()
        self.name, texts = self._prompt_texts()
        # C4 packs every document after an EOS token; its models expect one before a prompt.
        self.prompts = prompts_lib.encode(
            texts, self.tokenizer, train_data.source == "c4", cfg.seq_len
        )
        # No row can go past SEQ_LEN + 1 tokens (pax.decode.generate), so neither can the cache.
        shortest = min(len(p.ids) for p in self.prompts)
        self.max_new = min(options.max_new_tokens, cfg.seq_len + 1 - shortest)
        unrolled = self._set_up_layouts()
        self.generator = Generator(
            cfg,
            run.mesh,
            unrolled,
            self.max_new,
            self.sampling,
            self.tokenizer.eos_id if options.stop_at_eos else -1,
        )
        if need_checkpoint:
            self._require_checkpoint()

    def _checked_sampling(self):
        """The sampling options, checked against the model and tokenizer, with the limits."""
        cfg, options = self.run.task.model, self.options
        if self.tokenizer.vocab_size > cfg.vocab_size:
            raise UsageError(
                f"the tokenizer has {self.tokenizer.vocab_size} ids but the model's vocabulary "
                f"has {cfg.vocab_size} (VOCAB_SIZE); decode with the tokenizer it was trained with"
            )
        # Ids the tokenizer cannot spell (a vocabulary padded past the tokenizer's) are never
        # drawn.
        sampling = dataclasses.replace(options.sampling, vocab=self.tokenizer.vocab_size).check(
            cfg.vocab_size
        )
        if options.max_new_tokens < 1 or options.batch_size < 1:
            raise UsageError(
                f"--max_new_tokens ({options.max_new_tokens}) and --decode_batch_size "
                f"({options.batch_size}) must be at least 1"
            )
        return sampling

    def _prompt_texts(self) -> tuple[str, list[str]]:
        """(input name, prompt texts): the ones given, else prompts cut from the eval split."""
        options = self.options
        texts = list(options.prompts)
        if options.prompts_file:
            texts += prompts_lib.read_file(options.prompts_file)
        if texts:
            return "prompts", texts
        decode_set = next(d for d in self.run.datasets if not d.is_training)
        texts = prompts_lib.from_dataset(
            decode_set, self.tokenizer, options.num_prompts, options.prompt_tokens
        )
        if not texts:
            raise UsageError("no prompts: give --prompt TEXT or --prompts FILE")
        return decode_set.source, texts

    def _set_up_layouts(self):
        """Set how a checkpoint's state is read and laid out for decoding; returns the decoding
        variables' shardings, one array per layer."""
        run = self.run
        cfg = run.task.model
        # The state is read straight into its shardings over the whole mesh (a pmap run's
        # checkpoint holds one replica: it is read the same way), then the decoding model's
        # variables placed by the same rules (a pipeline's stages become one stack).
        self._placement = placement.for_run(run)
        # An SPMD run's placement holds the state over the whole mesh already; a pmap run's
        # holds one replica's.
        self.abstract = (
            state_lib.shardings(run.model, run.tx, run.mesh)[0]
            if run.strategy == placement.PMAP
            else self._placement.abstract
        )
        flat = state_lib.variable_shardings(decode_model(cfg, run.mesh), run.mesh)
        stages = run.task.mesh.num_stages
        self._layout = (
            jax.jit(lambda v: unstage(v, stages, cfg.num_layers), out_shardings=flat)
            if stages > 1
            else lambda v: v  # already the decoding model's layout and placement
        )
        # Repeated layers are decoded from one array per layer, laid out once per checkpoint,
        # so that no generator call slices a copy of every layer's weights out of the stack.
        unrolled_cfg = dataclasses.replace(cfg, use_repeated_layer=False)
        unrolled = state_lib.variable_shardings(decode_model(unrolled_cfg, run.mesh), run.mesh)
        self._unroll = (
            jax.jit(lambda v: unscan(v, cfg.num_layers), out_shardings=unrolled)
            if cfg.use_repeated_layer
            else lambda v: v
        )
        return unrolled

    def _require_checkpoint(self) -> None:
        checkpointer = self.checkpointer()
        try:
            if not (_has_dir(checkpointer) and checkpointer.all_steps()):
                raise UsageError(
                    f"no checkpoint in {checkpointer.directory}; train first (--mode=train) "
                    "or point --job_log_dir at a run that has one"
                )
        finally:
            checkpointer.close()

    def checkpointer(self):
        """A fresh view of the checkpoint directory (the trainer may have written since), in
        the run's checkpoint format."""
        return self._placement.checkpointer(self.job_dir, saving=False)

    def variables(self, checkpointer, step: int):
        """The decoding model's variables from the checkpoint at `step`: the parameters (and
        FP8 state) only, never the optimizer's statistics (twice the parameters with Adam)."""
        parts = state_lib.model_variables(self.abstract)
        return self._layout(restore_parts(checkpointer, step, parts))

    def decoding_variables(self, checkpointer, step: int):
        """`variables` laid out as decoding reads them, one array per layer (the stacked ones
        are dropped on return: only one layout is held while decoding)."""
        return self._unroll(self.variables(checkpointer, step))

    def decode(self, variables, step: int) -> list[dict]:
        """One record per prompt, in prompt order; `variables` in either layout."""
        if any("layers" in tree for tree in variables.values()):
            variables = self._unroll(variables)
        records = []
        batches = prompts_lib.batches(
            self.prompts,
            self.options.batch_size,
            self.generator.batch_multiple,
            self.run.task.model.seq_len,
        )
        sampling = {k: v for k, v in dataclasses.asdict(self.sampling).items() if k != "vocab"}
        for indices, batch in batches:
            out = self.generator(variables, batch, self.options.seed)
            for row, i in enumerate(indices):
                prompt = self.prompts[i]
                new = out.tokens[row, : out.counts[row]]
                records.append(
                    {
                        "step": step,
                        "index": i,
                        "prompt": prompt.text,
                        "completion": prompts_lib.completion_text(self.tokenizer, prompt.ids, new),
                        "prompt_tokens": int(len(prompt.ids)),
                        "completion_tokens": int(out.counts[row]),
                        "stop": out.stops[row],
                        "sampling": sampling,
                        "seed": self.options.seed,
                    }
                )
        return records

    def write(self, step: int, records: list[dict]) -> str:
        path = output_path(self.job_dir, self.name, step)
        if jax.process_index() == 0:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                for record in records:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
            os.replace(path + ".tmp", path)
        return path


def restore_parts(checkpointer, step: int, parts: dict) -> dict:
    """The saved state's top-level entries named in `parts` (abstract arrays with shardings),
    read and placed without the rest of the state."""
    if isinstance(checkpointer, FlaxFileCheckpointer):
        # One msgpack file: it is read whole, but only these parts reach the devices.
        path = os.path.join(checkpointer.directory, step_name(step))
        with open(path, "rb") as f:
            saved = serialization.msgpack_restore(f.read())["state"]
        saved = {k: saved[k] for k in parts if k in saved}
        check_compatible(path, saved, serialization.to_state_dict(parts))
        restored = serialization.from_state_dict(parts, saved)
        return jax.tree.map(
            lambda a, s: jax.device_put(np.asarray(a, s.dtype), s.sharding), restored, parts
        )
    _check_files(checkpointer.directory, step)
    # orbax's partial restore reads only the arrays asked for.
    path = epath.Path(checkpointer.directory) / step_name(step) / "state"
    metadata = ocp.StandardCheckpointHandler().metadata(path)
    check_compatible(step_name(step), {k: metadata[k] for k in parts if k in metadata}, parts)
    return ocp.PyTreeCheckpointer().restore(
        path,
        args=ocp.args.PyTreeRestore(
            parts,
            restore_args=ocp.checkpoint_utils.construct_restore_args(parts),
            partial_restore=True,
        ),
    )


def _check_files(directory: str, step: int) -> None:
    """Every file of the checkpoint, not only the parameters decoding reads, is checked against
    its digests: a checkpoint with damage anywhere is not one to take text from."""
    checkpoint_dir = os.path.join(directory, step_name(step))
    try:
        checked(checkpoint_dir)
    except CheckpointDamaged as e:
        if not os.path.isdir(checkpoint_dir):  # the trainer's retention deleted it meanwhile
            raise CheckpointError(f"{checkpoint_dir} was deleted while it was read") from e
        aside = os.path.join(os.path.dirname(directory), SET_ASIDE_DIR)
        raise CheckpointDamaged(
            f"{checkpoint_dir} is damaged: {e}; nothing was decoded. Move it to {aside}/ to "
            "decode the checkpoint before it (training does so when it resumes), or put a good "
            "copy back"
        ) from None


def _check_against_job(job_dir: str, run, tokenizer_path) -> None:
    """The experiment must be the one that trained the run (its config.json), so that the
    checkpoint's parameters mean what the decoder computes with them."""
    path = os.path.join(job_dir, "config.json")
    if not os.path.isfile(path):
        return  # a checkpoint copied without its config: the restore's shape check remains
    with open(path, encoding="utf-8") as f:
        written = json.load(f)
    trained = written.get("task", {}).get("model", {})
    now = dataclasses.asdict(run.task.model)
    differ = sorted(
        k for k in now if k in trained and k not in _SAME_FUNCTION and trained[k] != now[k]
    )
    if differ:
        shown = ", ".join(f"{k} {trained[k]!r} (now {now[k]!r})" for k in differ[:4])
        raise UsageError(
            f"{path}: the run was trained with {shown}; drop the --set that changes it "
            "(decoding takes the run's own from its config.json)"
        )
    trained_tokenizer = next(
        (d.get("tokenizer_path") for d in written.get("datasets", []) if d.get("is_training")),
        tokenizer_path,
    )
    if _describe(trained_tokenizer) != _describe(tokenizer_path):
        raise UsageError(
            f"the run was trained with {_describe(trained_tokenizer)} tokens ({path}), decoding "
            f"would use {_describe(tokenizer_path)} ones; set TOKENIZER_PATH to the model it was "
            "trained with"
        )


def _describe(tokenizer_path) -> str:
    if tokenizer_path is None:
        return "byte-level"
    return f"SentencePiece {os.path.basename(tokenizer_path)}"


def decode_once(decoder: Decoder) -> list[dict]:
    """Decodes the newest checkpoint that reads back, prints and writes the continuations."""
    checkpointer = decoder.checkpointer()
    try:
        steps = sorted(checkpointer.all_steps(), reverse=True) if _has_dir(checkpointer) else []
        for step in steps:
            try:
                variables = decoder.decoding_variables(checkpointer, step)
                break
            except (UsageError, CheckpointDamaged):
                raise
            except Exception as e:  # orbax/tensorstore/msgpack raise many types for bad files
                logging.warning(
                    "%s does not read back (%s: %s)",
                    step_name(step),
                    type(e).__name__,
                    str(e).splitlines()[0][:200] if str(e) else "",
                )
        else:
            raise CheckpointError(f"no checkpoint in {checkpointer.directory} reads back")
    finally:
        checkpointer.close()
    records = decoder.decode(variables, step)
    # Pax's name for the file holds the step alone: a second decode of it replaces the first's.
    replaces = os.path.isfile(output_path(decoder.job_dir, decoder.name, step))
    path = decoder.write(step, records)
    if jax.process_index() == 0:
        print(_show(records, step, decoder.sampling.method, path, replaces), flush=True)
    return records


def _has_dir(checkpointer) -> bool:
    return os.path.isdir(checkpointer.directory)


def _show(records: list[dict], step: int, method: str, path: str, replaces: bool) -> str:
    replaced = " (replacing an earlier decode of this step)" if replaces else ""
    lines = [f"{step_name(step)}, {method}: {len(records)} prompt(s) -> {path}{replaced}"]
    for r in records:
        lines += [
            f"--- prompt {r['index']} ({r['prompt_tokens']} tokens)",
            r["prompt"],
            f"--- completion ({r['completion_tokens']} tokens, stop: {r['stop']})",
            r["completion"],
        ]
    return "\n".join(lines)


def follow(decoder: Decoder, clock=time.monotonic, sleep=time.sleep) -> list[int]:
    """--mode=decode: decodes the newest checkpoint, then each newer one as it appears, until
    the one at NUM_TRAIN_STEPS; returns the steps decoded (or found decoded before)."""
    total = decoder.run.task.train.num_train_steps
    options = decoder.options
    decoded, last, waiting_since = [], -1, clock()
    while last < total:
        checkpointer = decoder.checkpointer()
        try:
            steps = (
                [s for s in checkpointer.all_steps() if s > last] if _has_dir(checkpointer) else []
            )
            if steps:
                step = max(steps)  # as Pax: the newest, skipping any a slow decoder missed
                path = output_path(decoder.job_dir, decoder.name, step)
                if os.path.isfile(path):
                    logging.info("%s: decoded before (%s)", step_name(step), path)
                else:
                    try:
                        variables = decoder.decoding_variables(checkpointer, step)
                    except (UsageError, CheckpointDamaged):
                        raise
                    except Exception as e:  # deleted by retention while read
                        logging.warning(
                            "%s does not read back (%s); waiting for the next",
                            step_name(step),
                            type(e).__name__,
                        )
                        last = step
                        continue
                    path = decoder.write(step, decoder.decode(variables, step))
                    logging.info(
                        "%s: %d prompt(s) decoded -> %s",
                        step_name(step),
                        len(decoder.prompts),
                        path,
                    )
                decoded.append(step)
                last, waiting_since = step, clock()
                continue
        finally:
            checkpointer.close()
        if options.wait_s and clock() - waiting_since > options.wait_s:
            after = f"after {step_name(last)}" if last >= 0 else "at all"
            raise NoNewCheckpoint(
                f"no new checkpoint in {decoder.job_dir}/checkpoints {after} for "
                f"{options.wait_s:g} s (--decode_wait_s); the trainer may have stopped"
            )
        sleep(options.poll_s)
    return decoded
