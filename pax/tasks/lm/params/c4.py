"""Pax's C4 convergence experiments, with Pax's hyper-parameters."""

from pax.experiments.base import BaseExperiment
from pax.experiments.registry import register
from pax.tasks.lm.params.cpu_size import CpuSizedLm


@register
class C4SpmdAdam(BaseExperiment):
    """Base of Pax's C4 runs: SentencePiece 32k vocabulary, bf16, remat.

    The optimizer is the base's, which is Pax's: Adam lr 1e-3, β 0.9/0.99, eps 1e-6, clip 5.0,
    weight decay 1e-3, linear rampup (4000) exponential decay (4001 → 300000, min ratio 0.1).
    """

    DATA_SOURCE = "c4"
    SEQ_LEN = 1024
    ACTIVATION = "gelu"
    FPROP_DTYPE = "bfloat16"
    USE_REPEATED_LAYER = True
    REMAT_POLICY = "full"  # Pax's SAVE_NOTHING
    NUM_TRAIN_STEPS = 300000
    CHECKPOINT_EVERY_N_STEPS = 1000
    SUMMARY_EVERY_N_STEPS = 10
    EVAL_EVERY_N_STEPS = 100


@register(pax_reference=True)
class C4Spmd1BAdam4Replicas(C4SpmdAdam):
    NUM_LAYERS = 13
    MODEL_DIMS = 2560
    HIDDEN_DIMS = 10240
    NUM_HEADS = 20
    DIMS_PER_HEAD = 128
    PERCORE_BATCH_SIZE = 32
    ICI_MESH_SHAPE = (1, 4, 1)


@register
class C4Spmd1BAdam4ReplicasFp8(C4Spmd1BAdam4Replicas):
    """The 1B run with FP8 projections and FFN matmuls (cuBLASLt FP8 GEMMs on H100/H200)."""

    USE_FP8 = True


@register(pax_reference=True)
class C4Spmd16BAdam32Replicas(C4SpmdAdam):
    NUM_LAYERS = 36
    MODEL_DIMS = 6144
    HIDDEN_DIMS = 24576
    NUM_HEADS = 48
    DIMS_PER_HEAD = 128
    PERCORE_BATCH_SIZE = 16
    ICI_MESH_SHAPE = (1, 16, 2)
    # Not Pax's: 256 queries at a time cut the compiled step's per-device plan by 8.7 GiB.
    ATTENTION_QUERY_CHUNK = 256


@register(pax_reference=True)
class C4SpmdPipelineGpt3SmallAdam64Replicas(C4SpmdAdam):
    """GPT-3 XL-sized layers in 4 pipeline stages on a [stage, replica, data, mdl] mesh.

    Pax's own class set a misspelled PER_CORE_BATCH_SIZE = 8 that nothing read, so it ran with
    per-core batch 1; that is the value here.
    """

    NUM_LAYERS = 24
    MODEL_DIMS = 3072
    HIDDEN_DIMS = 12288
    NUM_HEADS = 24
    DIMS_PER_HEAD = 128
    SEQ_LEN = 2048
    VOCAB_SIZE = 50257
    POSITION_EMBEDDING = "learned"
    PERCORE_BATCH_SIZE = 1
    MESH_AXIS_NAMES = ("stage", "replica", "data", "mdl")
    ICI_MESH_SHAPE = (4, 1, 4, 4)
    NUM_STAGES = 4
    NUM_MICROBATCHES = 16
    LEARNING_RATE = 2e-4
    ADAM_BETA2 = 0.95
    ADAM_EPSILON = 1e-8
    CLIP_GRADIENT_NORM_TO_VALUE = 1.0
    WEIGHT_DECAY = 0.1
    LR_SCHEDULE = "linear_rampup_cosine_decay"
    LR_WARMUP_STEPS = 265
    LR_DECAY_START = 266
    LR_DECAY_END = 108600


@register
class C4SpmdTinyAdam1Replica(CpuSizedLm, C4SpmdAdam):
    """C4 at CPU size: a byte-level 4 × 256 LM on one device, f32, packed rows of 128 tokens.

    Point it at shards with --data_dir (python -m pax.data sample writes small ones); set
    TOKENIZER_PATH (and VOCAB_SIZE) for a SentencePiece vocabulary.
    """

    REMAT_POLICY = "none"
    EVAL_NUM_BATCHES = 2
