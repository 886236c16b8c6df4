"""Pax's base Transformer LM configurations (paxml/tasks/lm/model_params.py), as attributes.

Each class sets what its namesake in paxml sets, translated to this project's attributes (the
declarations in pax.experiments.config name the Pax attribute each one stands for); what Pax
sets in task() through helpers (set_default_adam, set_default_adafactor, the softmax template)
is written out as attributes here. Values not set here are praxis's layer defaults
(BaseExperiment). tests/tasks/test_fidelity.py checks every resolved value against the values
read from paxml's and praxis's source.

Pax's CHECKPOINT_POLICY only acts where layers are repeated (StackedTransformerRepeated) or
pipelined (PipelinedTransformer); a plain StackedTransformer does not rematerialize. So
REMAT_POLICY is set where the policy takes effect, and left at 'none' where Pax's is inert.
"""

from pax.experiments.base import BaseExperiment


class _SetDefaultAdam:
    """paxml set_default_adam, which TransformerLmPmapAdam's and LmCloudSpmd's task() apply:
    Adam(beta1 0.9, beta2 0.99, clip_gradient_norm_to_value 5.0) and
    LinearRampupExponentialDecay(warmup 4000, decay 4001 -> 300000, min_ratio 0.1)."""

    OPTIMIZER = "adam"
    ADAM_BETA1 = 0.9
    ADAM_BETA2 = 0.99
    CLIP_GRADIENT_NORM_TO_VALUE = 5.0
    LR_SCHEDULE = "linear_rampup_exponential_decay"
    LR_WARMUP_STEPS = 4000
    LR_DECAY_START = 4001
    LR_DECAY_END = 300000
    LR_MIN_RATIO = 0.1


class TransformerLmPmapAdam(_SetDefaultAdam, BaseExperiment):
    """paxml TransformerLmPmapAdam: data-parallel (pmap), ReLU, Adam."""

    NUM_LAYERS = 32
    VOCAB_SIZE = 32000
    NUM_HEADS = 16
    MODEL_DIMS = 1024
    HIDDEN_DIMS = 1024 * 4
    LEARNING_RATE = 1e-3
    WEIGHT_DECAY = 1e-3
    USE_REPEATED_LAYER = False
    ACTIVATION = "relu"
    LR_DECAY_END = 300000  # DECAY_END
    ATTEN_LOGIT_CAP = 50.0
    USE_BIAS = False
    SCALE_SQRT_DEPTH = True  # softmax_tpl.scale_sqrt_depth


class TransformerLmSpmdAdafactor(BaseExperiment):
    """paxml TransformerLmSpmdAdafactor: SPMD, bf16, fused QKV, logit caps, Adafactor."""

    NUM_LAYERS = 10
    VOCAB_SIZE = 32000
    DIMS_PER_HEAD = 128
    NUM_HEADS = None
    MODEL_DIMS = 2048
    HIDDEN_DIMS = 2048 * 4
    FPROP_DTYPE = "bfloat16"
    USE_REPEATED_LAYER = False
    SEPARATE_EMBEDDING = False
    POSITION_EMBEDDING = "sinusoidal"  # TRAINABLE_POSITION_EMB = False
    TRAINABLE_PE_MAX_SEQ_LEN = 16 * 1024
    USE_ROTARY_POSITION_EMB = False
    COMBINE_QKV = True
    ACTIVATION = "relu"
    LR_DECAY_END = 100000  # DECAY_END
    USE_FP8 = False
    LEARNING_RATE = 2.5e-4
    CLIP_GRADIENT_NORM_TO_VALUE = 5.0
    WEIGHT_DECAY = 1e-3
    SOFTMAX_CAP = 30.0  # SOFTMAX_CAP_LOGITS
    ATTEN_LOGIT_CAP = 50.0
    CHECKPOINT_EVERY_N_STEPS = 5000
    SUMMARY_EVERY_N_STEPS = 100  # SUMMARY_INTERVAL_STEPS
    CHECKPOINT_MAX_TO_KEEP = 10
    EVAL_EVERY_N_STEPS = 100  # EVAL_INTERVAL_STEPS
    DCN_MESH_SHAPE = (1, 1, 1)
    USE_BIAS = False  # tr_atten_tpl.use_bias
    SCALE_SQRT_DEPTH = True
    # set_default_adafactor: ShardedAdafactor(decay_method='adam', beta1 0.9, decay_adam 0.99)
    # and LinearRampupExponentialDecay(4000, 4001, DECAY_END, min_ratio 0.1).
    OPTIMIZER = "adafactor"
    ADAM_BETA1 = 0.9
    ADAM_BETA2 = 0.99  # decay_adam
    LR_SCHEDULE = "linear_rampup_exponential_decay"
    LR_WARMUP_STEPS = 4000
    LR_DECAY_START = 4001
    LR_MIN_RATIO = 0.1


class TransformerLmSpmdPipelineAdafactor(TransformerLmSpmdAdafactor):
    """paxml TransformerLmSpmdPipelineAdafactor: the layers in pipeline stages over a
    [stage, replica, data, mdl] mesh; subclasses set NUM_STAGES and the microbatching."""

    USE_REPEATED_LAYER = False
    MESH_AXIS_NAMES = ("stage", "replica", "data", "mdl")
    DCN_MESH_SHAPE = (1, 1, 1, 1)
    # PipelinedTransformer rematerializes by CHECKPOINT_POLICY = SAVE_NOTHING.
    REMAT_POLICY = "full"
