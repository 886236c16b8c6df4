"""The base experiment: upper-case class attributes are hyper-parameters, methods resolve them.

Derive an experiment by subclassing and overriding attributes, as in Pax. Defaults are Pax's
Transformer LM defaults (vocab 32000, pre-LN, fused QKV, logit caps 30/50, Adam with
β1 0.9, β2 0.99, clip 5.0, linear-rampup exponential decay).
"""

import os
from typing import Optional

from pax.experiments import config


class BaseExperiment:
    # Model.
    VOCAB_SIZE = 32000
    NUM_LAYERS = 2
    MODEL_DIMS = 256
    HIDDEN_DIMS = 1024
    NUM_HEADS = 4
    DIMS_PER_HEAD: Optional[int] = None  # None: MODEL_DIMS // NUM_HEADS
    NUM_KV_HEADS: Optional[int] = None  # None: NUM_HEADS (no grouping)
    SEQ_LEN = 1024
    POSITION_EMBEDDING = "rotary"
    ACTIVATION = "relu"
    SOFTMAX_CAP = 30.0
    ATTEN_LOGIT_CAP = 50.0
    SEPARATE_EMBEDDING = False
    USE_REPEATED_LAYER = True
    REMAT_POLICY = "none"
    FPROP_DTYPE = "float32"
    # Attend this many queries at a time, recomputing each chunk in the backward pass: the same
    # math with 1/(SEQ_LEN / chunk) of the attention scores' memory. 0: the whole sequence.
    ATTENTION_QUERY_CHUNK = 0
    USE_FP8 = False  # FP8 (e4m3/e5m2, delayed scaling) projections and FFN matmuls

    # Optimizer.
    OPTIMIZER = "adam"
    LEARNING_RATE = 1e-3
    ADAM_BETA1 = 0.9
    ADAM_BETA2 = 0.99
    ADAM_EPSILON = 1e-6
    CLIP_GRADIENT_NORM_TO_VALUE = 5.0
    WEIGHT_DECAY = 1e-3
    LR_SCHEDULE = "linear_rampup_exponential_decay"
    LR_WARMUP_STEPS = 4000
    LR_DECAY_START = 4001
    LR_DECAY_END = 300000
    LR_MIN_RATIO = 0.1

    # Partitioning over Pax's mesh axes (replica, data, mdl; pipelines add stage).
    MESH_AXIS_NAMES = ("replica", "data", "mdl")
    ICI_MESH_SHAPE: Optional[tuple[int, ...]] = None
    DCN_MESH_SHAPE: Optional[tuple[int, ...]] = None
    NUM_STAGES = 1
    NUM_MICROBATCHES = 1

    # Training.
    PERCORE_BATCH_SIZE = 8
    NUM_TRAIN_STEPS = 1000
    SEED = 1234
    SUMMARY_EVERY_N_STEPS = 10
    EVAL_EVERY_N_STEPS = 100
    EVAL_NUM_BATCHES = 4
    CHECKPOINT_EVERY_N_STEPS = 1000
    CHECKPOINT_MAX_TO_KEEP = 3
    ASYNC_CHECKPOINTING = True
    NAN_POLICY = "stop"  # or 'skip': drop non-finite updates and count them
    # pmap runs (no ICI_MESH_SHAPE) write Pax's single-file Flax checkpoints unless this is set.
    PMAP_USE_TENSORSTORE = False

    # Data.
    DATA_SOURCE = "synthetic"
    DATA_DIR: Optional[str] = None  # C4 shards; --data_dir or $C4_DATA_DIR when None
    TOKENIZER_PATH: Optional[str] = None  # a SentencePiece .model; None: byte-level
    BAD_RECORD_POLICY = "stop"  # or 'skip': skip unreadable C4 records and count them

    def task(self) -> config.TaskConfig:
        dims_per_head = self.DIMS_PER_HEAD or self.MODEL_DIMS // self.NUM_HEADS
        model = config.ModelConfig(
            vocab_size=self.VOCAB_SIZE,
            num_layers=self.NUM_LAYERS,
            model_dims=self.MODEL_DIMS,
            hidden_dims=self.HIDDEN_DIMS,
            num_heads=self.NUM_HEADS,
            dims_per_head=dims_per_head,
            num_kv_heads=self.NUM_KV_HEADS or self.NUM_HEADS,
            max_seq_len=self.SEQ_LEN,
            position_embedding=self.POSITION_EMBEDDING,
            activation=self.ACTIVATION,
            softmax_cap=self.SOFTMAX_CAP,
            atten_logit_cap=self.ATTEN_LOGIT_CAP,
            separate_embedding=self.SEPARATE_EMBEDDING,
            use_repeated_layer=self.USE_REPEATED_LAYER,
            remat_policy=self.REMAT_POLICY,
            activation_dtype=self.FPROP_DTYPE,
            attention_query_chunk=self.ATTENTION_QUERY_CHUNK,
            use_fp8=self.USE_FP8,
        )
        optimizer = config.OptimizerConfig(
            kind=self.OPTIMIZER,
            learning_rate=self.LEARNING_RATE,
            schedule=config.ScheduleConfig(
                kind=self.LR_SCHEDULE,
                warmup_steps=self.LR_WARMUP_STEPS,
                decay_start=self.LR_DECAY_START,
                decay_end=self.LR_DECAY_END,
                min_ratio=self.LR_MIN_RATIO,
            ),
            beta1=self.ADAM_BETA1,
            beta2=self.ADAM_BETA2,
            epsilon=self.ADAM_EPSILON,
            clip_gradient_norm_to_value=self.CLIP_GRADIENT_NORM_TO_VALUE,
            weight_decay=self.WEIGHT_DECAY,
        )
        train = config.TrainConfig(
            num_train_steps=self.NUM_TRAIN_STEPS,
            percore_batch_size=self.PERCORE_BATCH_SIZE,
            seed=self.SEED,
            summary_every_n_steps=self.SUMMARY_EVERY_N_STEPS,
            eval_every_n_steps=self.EVAL_EVERY_N_STEPS,
            eval_num_batches=self.EVAL_NUM_BATCHES,
            checkpoint_every_n_steps=self.CHECKPOINT_EVERY_N_STEPS,
            checkpoint_max_to_keep=self.CHECKPOINT_MAX_TO_KEEP,
            async_checkpointing=self.ASYNC_CHECKPOINTING,
            nan_policy=self.NAN_POLICY,
            pmap_use_tensorstore=self.PMAP_USE_TENSORSTORE,
        )
        mesh = config.MeshConfig(
            ici_mesh_shape=_tuple_or_none(self.ICI_MESH_SHAPE),
            dcn_mesh_shape=_tuple_or_none(self.DCN_MESH_SHAPE),
            axis_names=tuple(self.MESH_AXIS_NAMES),
            num_stages=self.NUM_STAGES,
            num_microbatches=self.NUM_MICROBATCHES,
        )
        return config.TaskConfig(model=model, optimizer=optimizer, train=train, mesh=mesh)

    def datasets(self) -> list[config.DatasetConfig]:
        """The training split first, then the eval splits."""
        common = dict(
            source=self.DATA_SOURCE,
            seq_len=self.SEQ_LEN,
            seed=self.SEED,
            data_dir=self.DATA_DIR or os.environ.get("C4_DATA_DIR"),
            tokenizer_path=self.TOKENIZER_PATH,
            bad_record_policy=self.BAD_RECORD_POLICY,
        )
        return [
            config.DatasetConfig(name="train", is_training=True, **common),
            config.DatasetConfig(name=self.DATA_SOURCE, is_training=False, **common),
        ]


def _tuple_or_none(shape):
    return None if shape is None else tuple(shape)


def hyper_parameters(experiment_cls) -> dict:
    """Every upper-case attribute of the class and its bases, resolved."""
    return {name: getattr(experiment_cls, name) for name in dir(experiment_cls) if name.isupper()}
