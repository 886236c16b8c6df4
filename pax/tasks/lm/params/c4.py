"""Pax's C4 experiments (paxml/tasks/lm/params/c4.py), with Pax's hyper-parameters.

The pipeline experiment, C4SpmdPipelineGpt3SmallAdam64Replicas, is paxml v0.3.0's (Pax later
replaced it with an 8-replica variant); its bases are taken as they were then.
"""

from pax.experiments.base import BaseExperiment
from pax.experiments.registry import register
from pax.tasks.lm.model_params import (
    TransformerLmSpmdAdafactor,
    TransformerLmSpmdPipelineAdafactor,
)
from pax.tasks.lm.params.cpu_size import CpuSizedLm


class C4UnsupervisedDataset(BaseExperiment):
    """paxml C4UnsupervisedDataset: training input shuffled with seed 9876, packed; the eval
    input (seed 4321) read whole each evaluation (reset_for_eval)."""

    PERCORE_BATCH_SIZE = 1
    SEQ_LEN = 1024  # MAX_SEQ_LEN
    TRAINING_SEED = 9876
    EVAL_SEED = 4321
    EVAL_NUM_BATCHES = None
    DATA_SOURCE = "c4"


class _AdamAndSchedule:
    """What paxml's TransformerLmSpmdAdam and TransformerLmSpmdPipelineAdam add to their
    Adafactor bases (set_adam_and_learning_rate_schedule with their attributes)."""

    NUM_LAYERS = 32
    NUM_HEADS = 16
    MODEL_DIMS = 1024
    HIDDEN_DIMS = 1024 * 4
    FPROP_DTYPE = "float32"
    USE_BIAS = False
    OPTIMIZER = "adam"
    LEARNING_RATE = 1e-3
    ADAM_BETA1 = 0.9
    ADAM_BETA2 = 0.99
    ADAM_CLIP_THRESHOLD = 1.0
    ADAM_EPSILON = 1e-6
    ADAM_EPSILON_ROOT = 0.0
    LR_SCHEDULE = "linear_rampup_exponential_decay"
    LR_WARMUP_STEPS = 4000  # LR_LRED_WARMUP
    LR_DECAY_START = 4001  # LR_LRED_DECAY_START
    LR_DECAY_END = 300000  # LR_LRED_DECAY_END
    LR_MIN_RATIO = 0.1  # LR_LRED_MIN_RATIO


class TransformerLmSpmdAdam(_AdamAndSchedule, TransformerLmSpmdAdafactor):
    """paxml c4.py TransformerLmSpmdAdam."""


class TransformerLmSpmdPipelineAdam(_AdamAndSchedule, TransformerLmSpmdPipelineAdafactor):
    """paxml c4.py TransformerLmSpmdPipelineAdam."""


class _C4Model:
    """What paxml's C4SpmdAdam and C4SpmdPipelineAdam both set: 24 GELU layers of 2048 dims
    over the T5 vocabulary (32128), a checkpoint every 1000 steps."""

    NUM_LAYERS = 24
    NUM_HEADS = 32
    MODEL_DIMS = 2048
    HIDDEN_DIMS = 2048 * 4
    DIMS_PER_HEAD = None
    VOCAB_SIZE = 32128
    ACTIVATION = "gelu"
    CHECKPOINT_EVERY_N_STEPS = 1000


@register
class C4SpmdAdam(_C4Model, TransformerLmSpmdAdam, C4UnsupervisedDataset):
    """Base of Pax's C4 runs."""

    # CHECKPOINT_POLICY = SAVE_DOT_FOR_MLPERF_200B, inert: the layers are not repeated.
    ICI_MESH_SHAPE = (1, 4, 2)


@register(pax_reference=True)
class C4Spmd1BAdam4Replicas(C4SpmdAdam):
    NUM_LAYERS = 13
    MODEL_DIMS = 2560
    HIDDEN_DIMS = 2560 * 4
    NUM_HEADS = 20
    DIMS_PER_HEAD = 128
    PERCORE_BATCH_SIZE = 32
    SEQ_LEN = 1024
    VOCAB_SIZE = 32000
    FPROP_DTYPE = "bfloat16"
    USE_REPEATED_LAYER = True
    SUMMARY_EVERY_N_STEPS = 10
    REMAT_POLICY = "full"  # CHECKPOINT_POLICY = SAVE_NOTHING
    ICI_MESH_SHAPE = (1, 4, 1)


@register
class C4Spmd1BAdam4ReplicasFp8(C4Spmd1BAdam4Replicas):
    """The 1B run with FP8 projections and FFN matmuls (cuBLASLt FP8 GEMMs on H100/H200)."""

    USE_FP8 = True


@register(pax_reference=True)
class C4Spmd16BAdam32Replicas(C4SpmdAdam):
    NUM_LAYERS = 36
    MODEL_DIMS = 6144
    HIDDEN_DIMS = 6144 * 4
    NUM_HEADS = 48
    DIMS_PER_HEAD = 128
    PERCORE_BATCH_SIZE = 16
    SEQ_LEN = 1024
    VOCAB_SIZE = 32000
    FPROP_DTYPE = "bfloat16"
    USE_REPEATED_LAYER = True
    SUMMARY_EVERY_N_STEPS = 10
    REMAT_POLICY = "full"  # CHECKPOINT_POLICY = SAVE_NOTHING
    ICI_MESH_SHAPE = (1, 16, 2)
    # Not Pax's: 256 queries at a time shrink the compiled step's per-device plan (`./noxw -s aot`).
    ATTENTION_QUERY_CHUNK = 256


class C4SpmdPipelineAdam(_C4Model, TransformerLmSpmdPipelineAdam, C4UnsupervisedDataset):
    """paxml C4SpmdPipelineAdam (registered in Pax; a base here)."""

    REMAT_POLICY = "save_dot_for_mlperf_200b"  # CHECKPOINT_POLICY, acting on the pipeline
    MICROBATCH_SIZE = 2
    ICI_MESH_SHAPE = (2, 1, 2, 2)
    NUM_STAGES = 2


class C4SpmdPipelineGpt3AdamOrgHP(C4SpmdPipelineAdam):
    """paxml C4SpmdPipelineGpt3AdamOrgHP: GPT-3's own hyper-parameters, with what
    configure_gpt3_task sets (Gaussian(0.006) init everywhere, no softmax bias or cap, no
    embedding scaling, LayerNorm epsilon 1e-5, no PerDimScale, attention biases)."""

    SEQ_LEN = 2048  # MAX_SEQ_LEN
    NUM_LAYERS = 96
    NUM_HEADS = 96
    MODEL_DIMS = 12288
    HIDDEN_DIMS = 12288 * 4
    DIMS_PER_HEAD = None
    VOCAB_SIZE = 50257
    # Ours: 50304 rows, so any `mdl` up to 128 splits the tables. Pax split 50257 unevenly
    # (GSPMD); jax places a stored array only on mesh axes that divide it.
    VOCAB_PAD_MULTIPLE = 128
    USE_REPEATED_LAYER = False
    ACTIVATION = "gelu"
    SEPARATE_EMBEDDING = False
    POSITION_EMBEDDING = "learned"  # TRAINABLE_POSITION_EMB = True
    TRAINABLE_PE_MAX_SEQ_LEN = 16384
    ATTEN_LOGIT_CAP = -1.0  # disabled
    LEARNING_RATE = 6e-5
    WEIGHT_DECAY = 0.1
    ADAM_BETA1 = 0.9
    ADAM_BETA2 = 0.95
    ADAM_EPSILON = 1e-8
    ADAM_CLIP_THRESHOLD = -1.0  # disabled
    CLIP_GRADIENT_NORM_TO_VALUE = 1.0
    LAYERNORM_EPSILON = 1e-5
    LR_SCHEDULE = "linear_rampup_cosine_decay"
    LR_WARMUP_STEPS = 265  # LR_COS_WARMUP
    LR_DECAY_START = 265 + 1  # LR_COS_DECAY_START
    LR_DECAY_END = 108600  # LR_COS_DECAY_END
    LR_MIN_RATIO = 0.1  # LR_COS_MIN_RATIO
    REMAT_POLICY = "full"  # CHECKPOINT_POLICY = SAVE_NOTHING
    EVAL_EVERY_N_STEPS = 100
    SUMMARY_EVERY_N_STEPS = 10
    CHECKPOINT_EVERY_N_STEPS = 100
    CHECKPOINT_MAX_TO_KEEP = 10
    # configure_gpt3_task:
    WEIGHT_INIT = "gaussian"  # model_p.params_init = WeightInit.Gaussian(0.006)
    WEIGHT_INIT_SCALE = 0.006
    EMBEDDING_INIT_STD = 0.006  # softmax_tpl.params_init
    SOFTMAX_HAS_BIAS = False  # softmax_tpl.feed_forward_tpl.has_bias
    SOFTMAX_CAP = 0.0  # soft_cap_logits = None
    SCALE_SQRT_DEPTH = False
    PER_DIM_SCALE = False  # internal_enable_per_dim_scale
    USE_BIAS = True  # tr_atten_tpl.use_bias


@register(pax_reference=True)
class C4SpmdPipelineGpt3SmallAdam64Replicas(C4SpmdPipelineGpt3AdamOrgHP):
    """GPT-3 XL-sized layers in 4 pipeline stages on a [stage, replica, data, mdl] mesh.

    Pax's class sets PER_CORE_BATCH_SIZE = 8, a misspelling nothing reads, so it ran with the
    inherited per-core batch of 1: 64 rows a step, 4 microbatches of MICROBATCH_SIZE 16 (here
    the misspelling would be a usage error, hence PERCORE_BATCH_SIZE is not set).
    """

    NUM_STAGES = 4
    NUM_LAYERS = 24
    NUM_HEADS = 24
    MODEL_DIMS = 3072
    HIDDEN_DIMS = 3072 * 4
    DIMS_PER_HEAD = 128
    MICROBATCH_SIZE = 16
    FPROP_DTYPE = "bfloat16"
    LEARNING_RATE = 2.0e-4
    ICI_MESH_SHAPE = (4, 1, 4, 4)
    CHECKPOINT_MAX_TO_KEEP = 1000
    EVAL_EVERY_N_STEPS = 100
    SUMMARY_EVERY_N_STEPS = 1
    CHECKPOINT_EVERY_N_STEPS = 200


@register
class C4SpmdTinyAdam1Replica(CpuSizedLm, C4SpmdAdam):
    """C4 at CPU size (ours): a byte-level 4 × 256 LM, f32, packed rows of 128 tokens; the
    mesh's -1 takes every device there is (one on a plain CPU).

    Point it at shards with --data_dir (python -m pax.data sample writes small ones); set
    TOKENIZER_PATH (and VOCAB_SIZE) for a SentencePiece vocabulary.
    """

    EVAL_NUM_BATCHES = 2
