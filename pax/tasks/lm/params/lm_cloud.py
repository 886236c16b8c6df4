"""Pax's lm_cloud experiments (paxml/tasks/lm/params/lm_cloud.py, synthetic data), and a tiny
one of ours that trains on a laptop CPU."""

from pax.experiments.base import BaseExperiment
from pax.experiments.registry import register
from pax.tasks.lm.model_params import (
    TransformerLmPmapAdam,
    TransformerLmSpmdAdafactor,
    _SetDefaultAdam,
)
from pax.tasks.lm.params.cpu_size import CpuSizedLm


class SyntheticDataset(BaseExperiment):
    """paxml SyntheticDataset. Pax's synthetic batches are all ones (input_generator
    SyntheticLmData); here they are uniform random tokens, so a run is not trivially learnable.
    Its eval input reads one batch per evaluation (BaseInput.eval_loop_num_batches = 1)."""

    PERCORE_BATCH_SIZE = 16
    SEQ_LEN = 1024  # MAX_SEQ_LEN
    DATA_SOURCE = "synthetic"


@register
class LmCloudTransformerAdam(TransformerLmPmapAdam, SyntheticDataset):
    """Pax's pmap Transformer: no mesh shape, so data-parallel over every device. (paxml's
    class restates its base's layers, vocabulary, heads, dims and learning rate, all the same
    values: they are inherited here.)"""

    # Not Pax's: without remat, 256 queries at a time keep the per-device plan within a v4 chip
    # (`./noxw -s aot` prints it).
    ATTENTION_QUERY_CHUNK = 256


@register(pax_reference=True)
class LmCloudTransformerAdamLimitSteps(LmCloudTransformerAdam):
    NUM_LAYERS = 10
    NUM_TRAIN_STEPS = 2000


@register
class LmCloudSpmd(_SetDefaultAdam, TransformerLmSpmdAdafactor, SyntheticDataset):
    """Base of Pax's SPMD lm_cloud experiments: GELU, repeated layers, Adam (set_default_adam over
    its Adafactor base); no mesh of its own."""

    NUM_LAYERS = 10
    MODEL_DIMS = 2048
    HIDDEN_DIMS = 2048 * 4
    ACTIVATION = "gelu"  # ACTIVATION_CLS = GELU, USE_GATED_ACTIVATION = False
    USE_REPEATED_LAYER = True
    REMAT_POLICY = "full"  # CHECKPOINT_POLICY = SAVE_NOTHING


@register
class LmCloudSpmd2B(LmCloudSpmd):
    PERCORE_BATCH_SIZE = 8
    NUM_LAYERS = 18
    MODEL_DIMS = 3072
    HIDDEN_DIMS = 3072 * 4
    REMAT_POLICY = "full"  # CHECKPOINT_POLICY = SAVE_NOTHING
    ICI_MESH_SHAPE = (1, 4, 1)


@register(pax_reference=True)
class LmCloudSpmd2BLimitSteps(LmCloudSpmd2B):
    NUM_TRAIN_STEPS = 300


@register
class LmCloudSpmdTiny(CpuSizedLm, LmCloudSpmd):
    """The reference run for a CPU: a byte-level LM on CPython's pydoc topics (pax.data.corpus).

    About two minutes on 2 CPU cores; the loss falls from ln(256) ≈ 5.5 to well below the
    unigram entropy of the corpus's bytes (3.26 nats). Ours, not Pax's: LmCloudSpmd's model
    (sinusoidal positions, PerDimScale, biases, Adam with clip_threshold) at CPU size, with two
    of Pax's knobs set as other Pax experiments set them: USE_ROTARY_POSITION_EMB (on top of the
    sinusoidal positions, as model_params.py applies it; nvidia.py's Grok turns it on) and a
    Gaussian init (c4.py's GPT-3, nvidia.py's INIT_STD). With praxis's default Xavier, whose fans
    make the fused QKV weight ~10x smaller than 1/sqrt(D), the attention does not learn within
    150 steps: the run stalls near bigram level (eval 2.22 nats) and greedy decoding repeats
    " the". The mesh's -1 takes every device there is.
    """

    EVAL_NUM_BATCHES = 4
    DATA_SOURCE = "embedded"
    USE_ROTARY_POSITION_EMB = True
    WEIGHT_INIT = "gaussian"
    WEIGHT_INIT_SCALE = 256**-0.5  # 1/sqrt(MODEL_DIMS), a fan-in scale for the D-input weights


@register
class LmCloudSpmdTinyFp8(LmCloudSpmdTiny):
    """The CPU reference run with USE_FP8 (XLA emulates FP8 on CPU)."""

    USE_FP8 = True
