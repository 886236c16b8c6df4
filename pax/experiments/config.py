"""Resolved configuration: frozen dataclasses that everything downstream of an experiment reads.

An experiment class is where a human writes numbers; `task()` and `datasets()` turn them into
these records, which serialize to the job directory's config.json.
"""

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    num_layers: int
    model_dims: int
    hidden_dims: int
    num_heads: int
    dims_per_head: int
    num_kv_heads: int  # < num_heads: grouped-query attention
    max_seq_len: int
    position_embedding: str = "rotary"  # 'rotary' | 'learned'
    activation: str = "relu"  # 'relu' | 'gelu' | 'swiglu' | 'geglu'
    softmax_cap: float = 30.0  # Pax: cap * tanh(logits / cap) on the output logits; 0 disables
    atten_logit_cap: float = 50.0  # the same cap on attention logits; 0 disables
    separate_embedding: bool = False  # False: the softmax reuses the embedding table
    use_repeated_layer: bool = True  # stack layers with nn.scan ("repeated layers")
    remat_policy: str = "none"  # a name in pax.models.transformer.REMAT_POLICIES
    activation_dtype: str = "float32"
    param_dtype: str = "float32"
    norm_epsilon: float = 1e-6
    attention_query_chunk: int = 0  # > 0: attend this many queries at a time (less memory)
    use_fp8: bool = False  # FP8 attention projections and FFN matmuls (pax.models.fp8)


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    kind: str  # 'constant' | 'linear_rampup_exponential_decay' | 'linear_rampup_cosine_decay'
    warmup_steps: int = 0
    decay_start: int = 0
    decay_end: int = 0
    min_ratio: float = 0.1


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    kind: str  # 'adam' (Pax's: decoupled decay scaled by lr) | 'adamw' | 'adafactor'
    learning_rate: float
    schedule: ScheduleConfig
    beta1: float = 0.9
    beta2: float = 0.99
    epsilon: float = 1e-6
    clip_gradient_norm_to_value: float = 5.0  # 0 disables global-norm clipping
    weight_decay: float = 1e-3


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    ici_mesh_shape: Optional[tuple[int, ...]]  # None: data-parallel over every device
    dcn_mesh_shape: Optional[tuple[int, ...]]
    axis_names: tuple[str, ...] = ("replica", "data", "mdl")
    num_stages: int = 1  # > 1: pipeline stages over the `stage` axis
    num_microbatches: int = 1


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    num_train_steps: int
    percore_batch_size: int
    seed: int = 1234
    summary_every_n_steps: int = 10
    eval_every_n_steps: int = 100
    eval_num_batches: int = 4
    checkpoint_every_n_steps: int = 1000
    checkpoint_max_to_keep: int = 3
    async_checkpointing: bool = True
    nan_policy: str = "stop"  # 'stop': end the run at a non-finite step | 'skip': skip its update
    pmap_use_tensorstore: bool = False  # pmap runs: orbax/tensorstore checkpoints, not one file


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    model: ModelConfig
    optimizer: OptimizerConfig
    train: TrainConfig
    mesh: MeshConfig


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    name: str  # 'train' for the training split; eval splits are summarized as eval_test_<name>
    source: str  # 'embedded' | 'synthetic' | 'c4'
    is_training: bool
    seq_len: int
    seed: int
    data_dir: Optional[str] = None
    tokenizer_path: Optional[str] = None  # SentencePiece model; None: byte-level
    bad_record_policy: str = "stop"  # 'stop' | 'skip' (count) unreadable records


def to_dict(config) -> dict:
    return dataclasses.asdict(config)
