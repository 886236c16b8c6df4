"""Every hyper-parameter, declared once: name, type, default, allowed values, doc.

An experiment is a class whose upper-case attributes are hyper-parameters (as in Pax); each
attribute is a field of one of the section records below, under the same name in lower case
(`SEQ_LEN` is `ModelConfig.seq_len`, `FPROP_DTYPE` is `ModelConfig.fprop_dtype`). The field's
default is the base experiment's value (Pax's where Pax has one), and `pax` names the attribute
or praxis field it corresponds to. `pax.experiments.resolve` reads an experiment class through
these declarations, checks every value once, and returns the frozen records everything
downstream reads; they serialize to the job directory's config.json.
"""

import dataclasses
import typing
from typing import Any, Optional

_PRAXIS = "praxis "


def hp(default, doc: str, *, choices: tuple = (), pax: str = "", minimum=None):
    """A declared hyper-parameter: a dataclass field whose metadata carries its contract."""
    return dataclasses.field(
        default=default,
        metadata={"doc": doc, "choices": tuple(choices), "pax": pax, "minimum": minimum},
    )


DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = hp(32000, "vocabulary size", pax="VOCAB_SIZE", minimum=1)
    vocab_pad_multiple: int = hp(
        1,
        "round the embedding and softmax tables up to a multiple of this many ids, so that the "
        "mesh's `mdl` axis divides them; the padded ids' logits are masked out of the loss and "
        "out of sampling",
        minimum=1,
    )
    num_layers: int = hp(2, "Transformer layers", pax="NUM_LAYERS", minimum=1)
    model_dims: int = hp(256, "width of the residual stream", pax="MODEL_DIMS", minimum=1)
    hidden_dims: int = hp(1024, "width of the feed-forward layer", pax="HIDDEN_DIMS", minimum=1)
    num_heads: Optional[int] = hp(
        4, "attention heads; None: MODEL_DIMS // DIMS_PER_HEAD", pax="NUM_HEADS", minimum=1
    )
    dims_per_head: Optional[int] = hp(
        None, "dimensions per head; None: MODEL_DIMS // NUM_HEADS", pax="DIMS_PER_HEAD", minimum=1
    )
    num_kv_heads: Optional[int] = hp(
        None, "key/value heads (< NUM_HEADS: grouped-query attention); None: NUM_HEADS", minimum=1
    )
    seq_len: int = hp(1024, "tokens per example", pax="MAX_SEQ_LEN", minimum=1)
    position_embedding: str = hp(
        "sinusoidal",
        "absolute positions added to the embeddings: sinusoidal (praxis PositionalEmbedding), "
        "learned (TrainablePositionalEmbedding) or none",
        choices=("sinusoidal", "learned", "none"),
        pax="TRAINABLE_POSITION_EMB",
    )
    trainable_pe_max_seq_len: int = hp(
        16 * 1024, "rows of the learned position table", pax="TRAINABLE_PE_MAX_SEQ_LEN", minimum=1
    )
    use_rotary_position_emb: bool = hp(
        False, "rotate queries and keys by position (RoPE)", pax="USE_ROTARY_POSITION_EMB"
    )
    activation: str = hp(
        "relu",
        "feed-forward activation; swiglu/geglu are gated",
        choices=("relu", "gelu", "swiglu", "geglu"),
        pax="ACTIVATION_CLS, USE_GATED_ACTIVATION",
    )
    softmax_cap: float = hp(
        0.0,
        "cap * tanh(logits / cap) on the output logits; <= 0 disables",
        pax="SOFTMAX_CAP_LOGITS",
    )
    atten_logit_cap: float = hp(
        0.0, "the same cap on attention logits; <= 0 disables", pax="ATTEN_LOGIT_CAP"
    )
    per_dim_scale: bool = hp(
        True,
        "scale queries by a learned per-dimension factor (praxis PerDimScale, 1/sqrt(dims) at "
        "init); False: by (MODEL_DIMS // NUM_HEADS)^-0.5",
        pax="tr_atten_tpl.internal_enable_per_dim_scale",
    )
    use_bias: bool = hp(True, "biases on the attention projections", pax="USE_BIAS")
    ffn_has_bias: bool = hp(
        True, "biases on the feed-forward layers", pax="tr_fflayer_tpl.has_bias"
    )
    softmax_has_bias: bool = hp(
        True, "a bias on the output logits", pax="softmax_tpl.feed_forward_tpl.has_bias"
    )
    combine_qkv: bool = hp(
        False,
        "one [3, D, N, H] QKV weight (praxis CombinedQKVProjectionLayer) rather than three; "
        "here it decides the Xavier fan-in/out only: the projection is always one einsum",
        pax="COMBINE_QKV",
    )
    separate_embedding: bool = hp(
        False, "False: the softmax reuses the embedding table", pax="SEPARATE_EMBEDDING"
    )
    scale_sqrt_depth: bool = hp(
        False,
        "multiply looked-up embeddings by sqrt(MODEL_DIMS)",
        pax="softmax_tpl.scale_sqrt_depth",
    )
    weight_init: str = hp(
        "xavier",
        "initializer of the weight matrices: xavier (praxis's default: uniform, limit "
        "WEIGHT_INIT_SCALE * sqrt(6 / (fan_in + fan_out)) with praxis's fans) or gaussian "
        "(std WEIGHT_INIT_SCALE)",
        choices=("xavier", "gaussian"),
        pax="params_init",
    )
    weight_init_scale: float = hp(1.000001, "see WEIGHT_INIT", pax="params_init.scale", minimum=0.0)
    embedding_init_std: Optional[float] = hp(
        None,
        "std of the Gaussian embedding/softmax table; None: 1 / sqrt(MODEL_DIMS)",
        pax="softmax_tpl.params_init",
        minimum=0.0,
    )
    layernorm_epsilon: float = hp(1e-6, "LayerNorm epsilon", pax="LAYERNORM_EPSILON", minimum=0.0)
    use_repeated_layer: bool = hp(
        False, "stack the layers with nn.scan (Pax's repeated layers)", pax="USE_REPEATED_LAYER"
    )
    layer_scan_unroll: int = hp(
        1,
        "repeated layers per nn.scan iteration (NUM_LAYERS: the whole stack unrolled into "
        "straight-line code; parameters and checkpoints stay stacked either way)",
        minimum=1,
    )
    remat_policy: str = hp(
        "none",
        "rematerialization: none, full (Pax's SAVE_NOTHING), dots_saveable (SAVE_DOT_ONLY), "
        "dots_with_no_batch_dims_saveable (SAVE_DOT_WITH_NO_BATCH_DIM), "
        "save_dot_for_mlperf_200b (SAVE_DOT_FOR_MLPERF_200B)",
        choices=(
            "none",
            "full",
            "dots_saveable",
            "dots_with_no_batch_dims_saveable",
            "save_dot_for_mlperf_200b",
        ),
        pax="CHECKPOINT_POLICY",
    )
    fprop_dtype: str = hp("float32", "activation dtype", choices=DTYPES, pax="FPROP_DTYPE")
    param_dtype: str = hp("float32", "parameter dtype", choices=DTYPES, pax="dtype")
    attention_query_chunk: int = hp(
        0,
        "attend this many queries at a time, each chunk recomputed in the backward pass: the same "
        "math with chunk/SEQ_LEN of the scores' memory; 0: the whole sequence (Pax)",
        minimum=0,
    )
    attention_kernel: str = hp(
        "auto",
        "xla: attention as einsums and a softmax (the scores in memory); splash: jax's Pallas "
        "flash-attention kernel for TPU (interpreted elsewhere, for tests), SEQ_LEN a multiple "
        "of 128; auto: splash where the backend is TPU and SEQ_LEN allows, else xla",
        choices=("auto", "xla", "splash"),
    )
    use_fp8: bool = hp(False, "FP8 attention projections and FFN matmuls", pax="USE_FP8")
    cpu_kernels: str = hp(
        "auto",
        "the forms with custom gradients: a softmax of capped logits without its max pass, and "
        "the ones tuned on XLA:CPU (weight and bias gradients, rotary's sin/cos through an "
        "identity matmul); auto: the softmax everywhere, the rest where the backend is CPU; "
        "off is plain jnp, which forward-mode autodiff (jax.jvp) needs",
        choices=("auto", "on", "off"),
    )


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    optimizer: str = hp(
        "adam",
        "adam (praxis Adam: sharded_adam), adamw (optax's, no decay on vectors) or adafactor "
        "(praxis ShardedAdafactor as set_default_adafactor builds it)",
        choices=("adam", "adamw", "adafactor"),
        pax="learner.optimizer",
    )
    learning_rate: float = hp(1e-3, "peak learning rate", pax="LEARNING_RATE", minimum=0.0)
    adam_beta1: float = hp(0.9, "Adam β1; Adafactor's momentum β1", pax="ADAM_BETA1")
    adam_beta2: float = hp(0.999, "Adam β2; Adafactor's decay_adam", pax="ADAM_BETA2")
    adam_epsilon: float = hp(1e-6, "Adam epsilon outside the square root", pax="ADAM_EPSILON")
    adam_epsilon_root: float = hp(
        0.0, "Adam epsilon inside the square root", pax="ADAM_EPSILON_ROOT"
    )
    adam_clip_threshold: float = hp(
        1.0,
        "cap each tensor's update RMS at this (praxis sharded_adam update_capping; Adafactor's "
        "clip_threshold); <= 0 disables",
        pax="ADAM_CLIP_THRESHOLD",
    )
    clip_gradient_norm_to_value: float = hp(
        0.0, "clip gradients to this global norm; 0 disables", pax="CLIP_GRADIENT_NORM_TO_VALUE"
    )
    weight_decay: float = hp(
        0.0, "decoupled weight decay, scaled by the learning rate", pax="WEIGHT_DECAY"
    )
    lr_schedule: str = hp(
        "constant",
        "learning-rate schedule (praxis schedules)",
        choices=("constant", "linear_rampup_exponential_decay", "linear_rampup_cosine_decay"),
        pax="LR_SCHEDULE",
    )
    lr_warmup_steps: int = hp(4000, "linear warm-up steps", pax="LR_*_WARMUP", minimum=0)
    lr_decay_start: int = hp(4001, "first step of the decay", pax="LR_*_DECAY_START", minimum=0)
    lr_decay_end: int = hp(300000, "last step of the decay", pax="LR_*_DECAY_END", minimum=0)
    lr_min_ratio: float = hp(0.1, "the decay's floor, a fraction of the peak", pax="LR_*_MIN_RATIO")


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    mesh_axis_names: tuple[str, ...] = hp(
        ("replica", "data", "mdl"), "mesh axes; pipelines add `stage` first", pax="mesh_axis_names"
    )
    ici_mesh_shape: Optional[tuple[int, ...]] = hp(
        None,
        "devices per mesh axis within a slice; one -1 takes the devices left over; None: "
        "data-parallel through pmap",
        pax="ICI_MESH_SHAPE",
    )
    dcn_mesh_shape: Optional[tuple[int, ...]] = hp(
        None, "slices per mesh axis; None: one slice", pax="DCN_MESH_SHAPE"
    )
    num_stages: int = hp(
        1, "pipeline stages (> 1: a `stage` mesh axis)", pax="NUM_STAGES", minimum=1
    )
    num_microbatches: Optional[int] = hp(
        None,
        "pipeline microbatches; None: global batch / MICROBATCH_SIZE",
        pax="NUM_MICROBATCHES",
        minimum=1,
    )
    microbatch_size: Optional[int] = hp(
        None, "rows of the global batch per pipeline microbatch", pax="MICROBATCH_SIZE", minimum=1
    )


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    percore_batch_size: int = hp(
        8,
        "rows per device; the global batch is this times the devices",
        pax="PERCORE_BATCH_SIZE",
        minimum=1,
    )
    num_train_steps: int = hp(10_000_000, "steps to train", pax="train.num_train_steps", minimum=0)
    seed: int = hp(1234, "parameter initialization seed", pax="train.random_seed")
    summary_every_n_steps: int = hp(
        100, "train summaries every N steps", pax="SUMMARY_INTERVAL_STEPS", minimum=1
    )
    eval_every_n_steps: int = hp(
        100, "evaluate every N steps", pax="EVAL_INTERVAL_STEPS", minimum=1
    )
    eval_num_batches: Optional[int] = hp(
        1,
        "batches per evaluation; None: the whole eval split, once (Pax's reset_for_eval)",
        pax="eval_loop_num_batches",
        minimum=1,
    )
    target_log_pplx: Optional[float] = hp(
        None, "stop once the eval log-perplexity is at or below this", pax="TARGET_LOG_PPLX"
    )
    checkpoint_every_n_steps: int = hp(
        5000, "save a checkpoint every N steps", pax="CHECKPOINT_EVERY_N_STEPS", minimum=1
    )
    checkpoint_max_to_keep: int = hp(
        10, "newest checkpoints kept", pax="CHECKPOINT_MAX_TO_KEEP", minimum=1
    )
    async_checkpointing: bool = hp(True, "write checkpoints in the background")
    nan_policy: str = hp(
        "stop",
        "a NaN/Inf loss or gradient: stop the run, or skip the update and count it",
        choices=("stop", "skip"),
    )
    pmap_use_tensorstore: bool = hp(
        False, "pmap runs: orbax/tensorstore checkpoints instead of one Flax file"
    )


@dataclasses.dataclass(frozen=True)
class DataConfig:
    data_source: str = hp(
        "synthetic",
        "embedded (CPython's English text), synthetic (random tokens) or c4",
        choices=("embedded", "synthetic", "c4"),
    )
    data_dir: Optional[str] = hp(None, "C4 shards; --data_dir or $C4_DATA_DIR when None")
    tokenizer_path: Optional[str] = hp(None, "a SentencePiece .model; None: byte-level")
    bad_record_policy: str = hp(
        "stop", "an unreadable C4 record: stop, or skip and count it", choices=("stop", "skip")
    )
    training_seed: Optional[int] = hp(
        None, "shuffling of the training input; None: SEED", pax="TRAINING_SEED"
    )
    eval_seed: int = hp(
        0,
        "the eval input's seed, the same for every SEED: a fixed eval draw, as Pax scores a "
        "fixed split (see pax.data.sources); Pax's C4 runs: 4321",
        pax="input_random_seed (eval)",
    )


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    model: ModelConfig
    optimizer: OptimizerConfig
    train: TrainConfig
    mesh: MeshConfig
    data: DataConfig


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """One split as the input pipeline reads it (derived from DataConfig, not declared)."""

    name: str  # 'train' for the training split; eval splits are summarized as eval_test_<name>
    source: str
    is_training: bool
    seq_len: int
    seed: int
    data_dir: Optional[str] = None
    tokenizer_path: Optional[str] = None
    bad_record_policy: str = "stop"
    whole_split: bool = False  # eval: one pass over the whole split (EVAL_NUM_BATCHES=None)


SECTIONS = {
    "model": ModelConfig,
    "optimizer": OptimizerConfig,
    "train": TrainConfig,
    "mesh": MeshConfig,
    "data": DataConfig,
}


@dataclasses.dataclass(frozen=True)
class Param:
    """One declared hyper-parameter."""

    name: str  # the experiment attribute, e.g. SEQ_LEN
    section: str  # a key of SECTIONS
    type: Any  # the field's annotation: int, float, bool, str, Optional[...], tuple[int, ...]
    default: Any
    doc: str
    choices: tuple
    pax: str
    minimum: Any


def _declare() -> dict:
    params = {}
    for section, record in SECTIONS.items():
        hints = typing.get_type_hints(record)
        for f in dataclasses.fields(record):
            m = f.metadata
            name = f.name.upper()
            params[name] = Param(
                name,
                section,
                hints[f.name],
                f.default,
                m["doc"],
                m["choices"],
                m["pax"],
                m["minimum"],
            )
    return params


PARAMS: dict[str, Param] = _declare()


def to_dict(config) -> dict:
    return dataclasses.asdict(config)
