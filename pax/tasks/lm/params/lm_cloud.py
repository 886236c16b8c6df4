"""Pax's lm_cloud experiments (synthetic data), and a tiny one that trains on a laptop CPU."""

from pax.experiments.base import BaseExperiment
from pax.experiments.registry import register
from pax.tasks.lm.params.cpu_size import CpuSizedLm


@register
class LmCloudTransformerAdam(BaseExperiment):
    """Pax's pmap Transformer: no mesh shape, so data-parallel over every device."""

    NUM_LAYERS = 10
    MODEL_DIMS = 1024
    HIDDEN_DIMS = 4096
    NUM_HEADS = 16
    SEQ_LEN = 1024
    PERCORE_BATCH_SIZE = 16
    ACTIVATION = "relu"
    LEARNING_RATE = 1e-3
    WEIGHT_DECAY = 1e-3
    ICI_MESH_SHAPE = None
    # Not Pax's: without remat, 256 queries at a time take the per-device plan from 61 to 21 GiB.
    ATTENTION_QUERY_CHUNK = 256


@register(pax_reference=True)
class LmCloudTransformerAdamLimitSteps(LmCloudTransformerAdam):
    NUM_TRAIN_STEPS = 2000
    CHECKPOINT_EVERY_N_STEPS = 1000


@register
class LmCloudSpmd(BaseExperiment):
    """Base of Pax's SPMD lm_cloud experiments: 4-way data-parallel mesh, GELU."""

    ACTIVATION = "gelu"
    ICI_MESH_SHAPE = (1, 4, 1)
    LEARNING_RATE = 2.5e-4
    WEIGHT_DECAY = 1e-3


@register
class LmCloudSpmd2B(LmCloudSpmd):
    NUM_LAYERS = 18
    MODEL_DIMS = 3072
    HIDDEN_DIMS = 12288
    NUM_HEADS = 24
    DIMS_PER_HEAD = 128
    SEQ_LEN = 1024
    PERCORE_BATCH_SIZE = 8
    FPROP_DTYPE = "bfloat16"
    USE_REPEATED_LAYER = True
    REMAT_POLICY = "full"  # Pax's SAVE_NOTHING


@register(pax_reference=True)
class LmCloudSpmd2BLimitSteps(LmCloudSpmd2B):
    NUM_TRAIN_STEPS = 300
    CHECKPOINT_EVERY_N_STEPS = 300


@register
class LmCloudSpmdTiny(CpuSizedLm, LmCloudSpmd):
    """The reference run for a CPU: a byte-level LM on the text CPython ships (pydoc topics).

    About two minutes on 2 CPU cores; the loss falls from ln(256) ≈ 5.5 to well below the
    unigram entropy of the corpus's bytes (3.26 nats).
    """

    DATA_SOURCE = "embedded"


@register
class LmCloudSpmdTinyFp8(LmCloudSpmdTiny):
    """The CPU reference run with USE_FP8 (XLA emulates FP8 on CPU)."""

    USE_FP8 = True
