"""Fidelity table: each Pax-named experiment (and the Pax bases it derives from) resolves to the
values paxml and praxis set, read from their source, not from this project's code.

Sources (read with the stored copies of google/paxml and google/praxis):
  paxml v1.4.0 (tag paxml-v1.4.0, b5a3fcd): paxml/tasks/lm/model_params.py, params/lm_cloud.py,
      params/c4.py, paxml/tasks_lib.py
  paxml v0.3.0 (tag paxml-v0.3.0, 9daa78f): params/c4.py for C4SpmdPipelineGpt3SmallAdam64Replicas
      and its bases as they were then (Pax replaced the class by an 8-replica one in March 2023)
  praxis v1.4.0 (tag praxis-v1.4.0, c097dfe): praxis/layers/{transformer_models, transformers,
      attentions, embedding_softmax, linears, normalizations}.py, praxis/base_layer.py,
      praxis/base_input.py, praxis/optimizers.py

Each Pax class below is written as the values it sets, already in this project's attribute
names (the translation is in the comments: Pax's name, or the praxis field the value lands in).
An experiment's expected values are its Pax class chain merged in Pax's method resolution
order over praxis's and paxml's defaults. A deliberate difference is a DIFFERS row with its
reason; docs/experiments.md's "Fidelity to Pax" section lists them (checked below).
"""

import dataclasses
import math
import re

import jax
import pytest

from pax import paths
from pax.experiments import config, registry
from pax.experiments.base import resolve
from pax.tasks.lm import model_params
from pax.tasks.lm.params import c4 as c4_params
from pax.train import state as state_lib

PRAXIS = "praxis v1.4.0"
PAXML = "paxml v1.4.0"
PAXML_03 = "paxml v0.3.0"


@dataclasses.dataclass
class Layer:
    """Values one upstream class (or helper, or layer default) sets; a value may be a function
    of the merged values (Pax computes some in task(), e.g. softmax_init from MODEL_DIMS)."""

    source: str  # "<release> <file> <class or function>"
    values: dict


# --- praxis's layer defaults and paxml's task defaults: what no Pax class overrides ---------

PRAXIS_DEFAULTS = [
    Layer(
        f"{PRAXIS} praxis/layers/transformer_models.py TransformerLm",
        {
            "POSITION_EMBEDDING": "sinusoidal",  # position_emb_tpl = PositionalEmbedding
            "SEPARATE_EMBEDDING": False,  # separate_embedding_tpl = None
        },
    ),
    Layer(
        f"{PRAXIS} praxis/layers/attentions.py DotProductAttention",
        {
            "USE_ROTARY_POSITION_EMB": False,  # use_rotary_position_emb
            "PER_DIM_SCALE": True,  # internal_enable_per_dim_scale
            "USE_BIAS": True,  # use_bias
            "COMBINE_QKV": False,  # combine_qkv
            "ATTEN_LOGIT_CAP": 0.0,  # atten_logit_cap
        },
    ),
    Layer(
        f"{PRAXIS} praxis/layers/transformers.py TransformerFeedForward",
        {"FFN_HAS_BIAS": True, "ACTIVATION": "relu"},  # has_bias, activation_tpl = ReLU
    ),
    Layer(
        f"{PRAXIS} praxis/layers/embedding_softmax.py SharedEmbeddingSoftmax/FullSoftmax",
        {
            "SOFTMAX_CAP": 0.0,  # soft_cap_logits
            "SCALE_SQRT_DEPTH": False,  # scale_sqrt_depth
            "SOFTMAX_HAS_BIAS": True,  # feed_forward_tpl = linears.FeedForward (has_bias=True)
        },
    ),
    Layer(f"{PRAXIS} praxis/layers/normalizations.py LayerNorm", {"LAYERNORM_EPSILON": 1e-6}),
    Layer(
        f"{PRAXIS} praxis/base_layer.py BaseLayer, default_param_init",
        {
            "PARAM_DTYPE": "float32",  # dtype
            "FPROP_DTYPE": "float32",  # fprop_dtype None: dtype
            "WEIGHT_INIT": "xavier",  # WeightInit.Xavier(_DEFAULT_XAVIER_INIT)
            "WEIGHT_INIT_SCALE": 1.000001,
        },
    ),
    Layer(
        f"{PRAXIS} praxis/optimizers.py Adam, BaseOptimizer",
        {
            "ADAM_EPSILON": 1e-6,  # Adam.epsilon
            "ADAM_EPSILON_ROOT": 0.0,  # Adam.epsilon_root
            "ADAM_CLIP_THRESHOLD": 1.0,  # Adam.clip_threshold (ShardedAdafactor's too)
        },
    ),
    Layer(
        f"{PRAXIS} praxis/base_input.py BaseInput",
        {"EVAL_NUM_BATCHES": 1},  # eval_loop_num_batches (without reset_for_eval)
    ),
    Layer(
        f"{PAXML} paxml/tasks_lib.py SingleTask.Train",
        {
            "NUM_TRAIN_STEPS": 10_000_000,  # num_train_steps = 1e7
            "CHECKPOINT_EVERY_N_STEPS": 5000,  # save_interval_steps
            "CHECKPOINT_MAX_TO_KEEP": 10,  # save_max_to_keep
            "SUMMARY_EVERY_N_STEPS": 100,  # summary_interval_steps
            "EVAL_EVERY_N_STEPS": 100,  # eval_interval_steps
            "SEED": 1234,  # random_seed
        },
    ),
    Layer(
        f"{PAXML} paxml/tasks/lm/params/c4.py EarlyStoppingFn",
        {"TARGET_LOG_PPLX": None},  # only configure_gpt3_task (v1.4.0) installs one
    ),
    Layer(
        f"{PAXML} paxml/tasks/lm/model_params.py (Pax's LMs: multi-head, no pipeline, no FP8)",
        {
            "NUM_KV_HEADS": lambda e: e["NUM_HEADS"],
            "REMAT_POLICY": "none",  # StackedTransformer.remat = False
            "NUM_STAGES": 1,
            "MICROBATCH_SIZE": None,
            "NUM_MICROBATCHES": None,
            "USE_FP8": False,
            "ATTENTION_QUERY_CHUNK": 0,  # DotProductAttention attends the whole sequence at once
            # Read only with TRAINABLE_POSITION_EMB (TransformerLmSpmdAdafactor's value).
            "TRAINABLE_PE_MAX_SEQ_LEN": 16 * 1024,
        },
    ),
    Layer(
        "ours: Pax's synthetic data has no seed; one fixed eval draw for every SEED",
        {"TRAINING_SEED": lambda e: e["SEED"], "EVAL_SEED": 0},
    ),
]


def _pax_heads(values: dict) -> dict:
    """What Pax's task() and praxis derive from NUM_HEADS / DIMS_PER_HEAD left at None:
    TransformerLmSpmdAdafactor.task: num_heads = MODEL_DIMS / DIMS_PER_HEAD when NUM_HEADS is
    None; praxis DotProductAttention: dim_per_head = hidden_dim // num_heads when None."""
    v = dict(values)
    if v["NUM_HEADS"] is None:
        v["NUM_HEADS"] = v["MODEL_DIMS"] // v["DIMS_PER_HEAD"]
    if v["DIMS_PER_HEAD"] is None:
        v["DIMS_PER_HEAD"] = v["MODEL_DIMS"] // v["NUM_HEADS"]
    return v


SET_DEFAULT_ADAM = Layer(
    f"{PAXML} paxml/tasks/lm/model_params.py set_default_adam",
    {
        "OPTIMIZER": "adam",
        "ADAM_BETA1": 0.9,
        "ADAM_BETA2": 0.99,
        "CLIP_GRADIENT_NORM_TO_VALUE": 5.0,
        "LR_SCHEDULE": "linear_rampup_exponential_decay",
        "LR_WARMUP_STEPS": 4000,
        "LR_DECAY_START": 4001,
        "LR_DECAY_END": 300000,
        "LR_MIN_RATIO": 0.1,
    },
)

LM_CLOUD_TRANSFORMER_ADAM = Layer(
    f"{PAXML} paxml/tasks/lm/params/lm_cloud.py LmCloudTransformerAdam",
    {
        "NUM_LAYERS": 32,
        "VOCAB_SIZE": 32000,
        "NUM_HEADS": 16,
        "MODEL_DIMS": 1024,
        "HIDDEN_DIMS": 4096,
        "LEARNING_RATE": 1e-3,
    },
)

TRANSFORMER_LM_PMAP_ADAM = [
    Layer(
        f"{PAXML} paxml/tasks/lm/model_params.py TransformerLmPmapAdam",
        {
            "NUM_LAYERS": 32,
            "VOCAB_SIZE": 32000,
            "NUM_HEADS": 16,
            "DIMS_PER_HEAD": None,  # not set (StackedTransformer.dim_per_head = None)
            "MODEL_DIMS": 1024,
            "HIDDEN_DIMS": 4096,
            "LEARNING_RATE": 1e-3,
            "WEIGHT_DECAY": 1e-3,
            "USE_REPEATED_LAYER": False,
            "ACTIVATION": "relu",  # ACTIVATION_CLS = ReLU, USE_GATED_ACTIVATION = False
            "ATTEN_LOGIT_CAP": 50.0,
            "USE_BIAS": False,
            "SCALE_SQRT_DEPTH": True,  # softmax_tpl.scale_sqrt_depth = True
            "EMBEDDING_INIT_STD": lambda e: 1.0 / math.sqrt(e["MODEL_DIMS"]),  # softmax_init
            "ICI_MESH_SHAPE": None,  # pmap
            "DCN_MESH_SHAPE": None,
            "MESH_AXIS_NAMES": ("replica", "data", "mdl"),
        },
    ),
    dataclasses.replace(SET_DEFAULT_ADAM, values={**SET_DEFAULT_ADAM.values}),  # DECAY_END 300000
]

TRANSFORMER_LM_SPMD_ADAFACTOR = [
    Layer(
        f"{PAXML} paxml/tasks/lm/model_params.py TransformerLmSpmdAdafactor",
        {
            "NUM_LAYERS": 10,
            "VOCAB_SIZE": 32000,
            "DIMS_PER_HEAD": 128,
            "NUM_HEADS": None,  # derived in task(): MODEL_DIMS / DIMS_PER_HEAD
            "MODEL_DIMS": 2048,
            "HIDDEN_DIMS": 8192,
            "FPROP_DTYPE": "bfloat16",
            "USE_REPEATED_LAYER": False,
            "SEPARATE_EMBEDDING": False,
            "POSITION_EMBEDDING": "sinusoidal",  # TRAINABLE_POSITION_EMB = False
            "TRAINABLE_PE_MAX_SEQ_LEN": 16 * 1024,
            "USE_ROTARY_POSITION_EMB": False,
            "COMBINE_QKV": True,
            "ACTIVATION": "relu",
            "USE_FP8": False,
            "LEARNING_RATE": 2.5e-4,
            "CLIP_GRADIENT_NORM_TO_VALUE": 5.0,
            "WEIGHT_DECAY": 1e-3,
            "SOFTMAX_CAP": 30.0,  # SOFTMAX_CAP_LOGITS
            "ATTEN_LOGIT_CAP": 50.0,
            "CHECKPOINT_EVERY_N_STEPS": 5000,
            "SUMMARY_EVERY_N_STEPS": 100,  # SUMMARY_INTERVAL_STEPS
            "CHECKPOINT_MAX_TO_KEEP": 10,
            "EVAL_EVERY_N_STEPS": 100,  # EVAL_INTERVAL_STEPS
            "ICI_MESH_SHAPE": None,
            "DCN_MESH_SHAPE": (1, 1, 1),
            "MESH_AXIS_NAMES": ("replica", "data", "mdl"),  # set_sharding_annotations_v1
            "USE_BIAS": False,  # tr_atten_tpl.use_bias = False
            "SCALE_SQRT_DEPTH": True,
            "EMBEDDING_INIT_STD": lambda e: 1.0 / math.sqrt(e["MODEL_DIMS"]),  # softmax_init
            # set_default_adafactor(decay_end=DECAY_END = 100000):
            "OPTIMIZER": "adafactor",  # ShardedAdafactor(decay_method='adam')
            "ADAM_BETA1": 0.9,  # beta1
            "ADAM_BETA2": 0.99,  # decay_adam
            "LR_SCHEDULE": "linear_rampup_exponential_decay",
            "LR_WARMUP_STEPS": 4000,
            "LR_DECAY_START": 4001,
            "LR_DECAY_END": 100000,
            "LR_MIN_RATIO": 0.1,
        },
    )
]

SYNTHETIC_DATASET = [
    Layer(
        f"{PAXML} paxml/tasks/lm/params/lm_cloud.py SyntheticDataset",
        {"PERCORE_BATCH_SIZE": 16, "SEQ_LEN": 1024, "DATA_SOURCE": "synthetic"},
    )
]

LM_CLOUD_SPMD = [
    Layer(
        f"{PAXML} paxml/tasks/lm/params/lm_cloud.py LmCloudSpmd",
        {
            "NUM_LAYERS": 10,
            "MODEL_DIMS": 2048,
            "HIDDEN_DIMS": 8192,
            "ACTIVATION": "gelu",
            "USE_REPEATED_LAYER": True,
            "REMAT_POLICY": "full",  # CHECKPOINT_POLICY = SAVE_NOTHING on repeated layers
        },
    ),
    SET_DEFAULT_ADAM,  # LmCloudSpmd.task applies it over the Adafactor base
]

LM_CLOUD_SPMD_2B = [
    Layer(
        f"{PAXML} paxml/tasks/lm/params/lm_cloud.py LmCloudSpmd2B",
        {
            "PERCORE_BATCH_SIZE": 8,
            "NUM_LAYERS": 18,
            "MODEL_DIMS": 3072,
            "HIDDEN_DIMS": 12288,
            "REMAT_POLICY": "full",
            "ICI_MESH_SHAPE": (1, 4, 1),
        },
    )
]

C4_DATASET = Layer(
    f"{PAXML} paxml/tasks/lm/params/c4.py C4UnsupervisedDataset",
    {
        "PERCORE_BATCH_SIZE": 1,
        "SEQ_LEN": 1024,  # MAX_SEQ_LEN
        "TRAINING_SEED": 9876,
        "EVAL_SEED": 4321,  # input_random_seed of the eval input
        "EVAL_NUM_BATCHES": None,  # reset_for_eval=True: the whole validation set
        "DATA_SOURCE": "c4",
    },
)
C4_DATASET_03 = dataclasses.replace(
    C4_DATASET, source=f"{PAXML_03} paxml/tasks/lm/params/c4.py C4UnsupervisedDataset (seed 9876)"
)


def _adam_bases(release):
    return Layer(
        f"{release} paxml/tasks/lm/params/c4.py TransformerLmSpmdAdam / "
        "TransformerLmSpmdPipelineAdam + set_adam_and_learning_rate_schedule",
        {
            "NUM_LAYERS": 32,
            "NUM_HEADS": 16,
            "MODEL_DIMS": 1024,
            "HIDDEN_DIMS": 4096,
            "FPROP_DTYPE": "float32",
            "USE_BIAS": False,
            "OPTIMIZER": "adam",
            "LEARNING_RATE": 1e-3,
            "ADAM_BETA1": 0.9,
            "ADAM_BETA2": 0.99,
            "ADAM_CLIP_THRESHOLD": 1.0,
            "ADAM_EPSILON": 1e-6,
            "ADAM_EPSILON_ROOT": 0.0,
            "LR_SCHEDULE": "linear_rampup_exponential_decay",
            "LR_WARMUP_STEPS": 4000,  # LR_LRED_WARMUP
            "LR_DECAY_START": 4001,  # LR_LRED_DECAY_START
            "LR_DECAY_END": 300000,  # LR_LRED_DECAY_END
            "LR_MIN_RATIO": 0.1,  # LR_LRED_MIN_RATIO
        },
    )


C4_SPMD_ADAM = Layer(
    f"{PAXML} paxml/tasks/lm/params/c4.py C4SpmdAdam",
    {
        "NUM_LAYERS": 24,
        "NUM_HEADS": 32,
        "MODEL_DIMS": 2048,
        "HIDDEN_DIMS": 8192,
        "DIMS_PER_HEAD": None,  # "Defaults to MODEL_DIMS // NUM_HEADS."
        "VOCAB_SIZE": 32128,
        "ACTIVATION": "gelu",
        # CHECKPOINT_POLICY = SAVE_DOT_FOR_MLPERF_200B: inert, the layers are not repeated.
        "CHECKPOINT_EVERY_N_STEPS": 1000,
        "ICI_MESH_SHAPE": (1, 4, 2),
    },
)


def _c4_sized(cls_name, layers, dims, heads, batch, ici):
    return Layer(
        f"{PAXML} paxml/tasks/lm/params/c4.py {cls_name}",
        {
            "NUM_LAYERS": layers,
            "MODEL_DIMS": dims,
            "HIDDEN_DIMS": dims * 4,
            "NUM_HEADS": heads,
            "DIMS_PER_HEAD": 128,
            "PERCORE_BATCH_SIZE": batch,
            "SEQ_LEN": 1024,
            "VOCAB_SIZE": 32000,
            "FPROP_DTYPE": "bfloat16",
            "USE_REPEATED_LAYER": True,
            "SUMMARY_EVERY_N_STEPS": 10,
            "REMAT_POLICY": "full",  # CHECKPOINT_POLICY = SAVE_NOTHING
            "ICI_MESH_SHAPE": ici,
        },
    )


PIPELINE_ADAFACTOR_03 = Layer(
    f"{PAXML_03} paxml/tasks/lm/model_params.py TransformerLmSpmdPipelineAdafactor",
    {
        "USE_REPEATED_LAYER": False,
        "MESH_AXIS_NAMES": ("stage", "replica", "data", "mdl"),
        "DCN_MESH_SHAPE": (1, 1, 1, 1),
        "REMAT_POLICY": "full",  # PipelinedTransformer(checkpoint_policy=SAVE_NOTHING)
    },
)

C4_SPMD_PIPELINE_ADAM_03 = Layer(
    f"{PAXML_03} paxml/tasks/lm/params/c4.py C4SpmdPipelineAdam",
    {
        "NUM_LAYERS": 24,
        "NUM_HEADS": 32,
        "MODEL_DIMS": 2048,
        "HIDDEN_DIMS": 8192,
        "DIMS_PER_HEAD": None,
        "VOCAB_SIZE": 32128,
        "ACTIVATION": "gelu",
        "REMAT_POLICY": "save_dot_for_mlperf_200b",  # acts on the pipeline
        "CHECKPOINT_EVERY_N_STEPS": 1000,
        "MICROBATCH_SIZE": 2,
        "NUM_MICROBATCHES": None,
        "ICI_MESH_SHAPE": (2, 1, 2, 2),
        "NUM_STAGES": 2,
    },
)

GPT3_ORG_HP_03 = [
    Layer(
        f"{PAXML_03} paxml/tasks/lm/params/c4.py C4SpmdPipelineGpt3AdamOrgHP",
        {
            "SEQ_LEN": 2048,
            "NUM_LAYERS": 96,
            "NUM_HEADS": 96,
            "MODEL_DIMS": 12288,
            "HIDDEN_DIMS": 12288 * 4,
            "DIMS_PER_HEAD": None,
            "VOCAB_SIZE": 50257,
            "USE_REPEATED_LAYER": False,
            "ACTIVATION": "gelu",
            "SEPARATE_EMBEDDING": False,
            "POSITION_EMBEDDING": "learned",  # TRAINABLE_POSITION_EMB = True
            "TRAINABLE_PE_MAX_SEQ_LEN": 16384,
            "ATTEN_LOGIT_CAP": -1.0,
            "LEARNING_RATE": 6e-5,
            "WEIGHT_DECAY": 0.1,
            "ADAM_BETA1": 0.9,
            "ADAM_BETA2": 0.95,
            "ADAM_EPSILON": 1e-8,
            "ADAM_CLIP_THRESHOLD": -1.0,
            "CLIP_GRADIENT_NORM_TO_VALUE": 1.0,
            "LAYERNORM_EPSILON": 1e-5,
            "LR_SCHEDULE": "linear_rampup_cosine_decay",
            "LR_WARMUP_STEPS": 265,  # LR_COS_WARMUP
            "LR_DECAY_START": 266,  # LR_COS_DECAY_START = LR_COS_WARMUP + 1
            "LR_DECAY_END": 108600,  # LR_COS_DECAY_END
            "LR_MIN_RATIO": 0.1,  # LR_COS_MIN_RATIO
            "REMAT_POLICY": "full",  # CHECKPOINT_POLICY = SAVE_NOTHING, on the pipeline
            "EVAL_EVERY_N_STEPS": 100,
            "SUMMARY_EVERY_N_STEPS": 10,
            "CHECKPOINT_EVERY_N_STEPS": 100,
            "CHECKPOINT_MAX_TO_KEEP": 10,
        },
    ),
    Layer(
        f"{PAXML_03} paxml/tasks/lm/params/c4.py configure_gpt3_task",
        {
            "WEIGHT_INIT": "gaussian",  # model_p.params_init = WeightInit.Gaussian(0.006)
            "WEIGHT_INIT_SCALE": 0.006,
            "EMBEDDING_INIT_STD": 0.006,  # softmax_tpl.params_init = Gaussian(0.006)
            "SOFTMAX_HAS_BIAS": False,  # softmax_tpl.feed_forward_tpl.has_bias = False
            "SOFTMAX_CAP": 0.0,  # soft_cap_logits = None
            "SCALE_SQRT_DEPTH": False,
            "LAYERNORM_EPSILON": 1e-5,  # every ln_tpl.epsilon = LAYERNORM_EPSILON
            "PER_DIM_SCALE": False,  # internal_enable_per_dim_scale = False
            "USE_BIAS": True,  # tr_atten_tpl.use_bias = True
        },
    ),
]

GPT3_SMALL_64 = Layer(
    f"{PAXML_03} paxml/tasks/lm/params/c4.py C4SpmdPipelineGpt3SmallAdam64Replicas",
    {
        "NUM_STAGES": 4,
        "NUM_LAYERS": 24,
        "NUM_HEADS": 24,
        "MODEL_DIMS": 3072,
        "HIDDEN_DIMS": 3072 * 4,
        "DIMS_PER_HEAD": 128,
        # PER_CORE_BATCH_SIZE = 8: misspelled, read by nothing; PERCORE_BATCH_SIZE stays 1.
        "MICROBATCH_SIZE": 16,
        "FPROP_DTYPE": "bfloat16",
        "LEARNING_RATE": 2.0e-4,
        "ICI_MESH_SHAPE": (4, 1, 4, 4),
        "CHECKPOINT_MAX_TO_KEEP": 1000,
        "EVAL_EVERY_N_STEPS": 100,
        "SUMMARY_EVERY_N_STEPS": 1,
        "CHECKPOINT_EVERY_N_STEPS": 200,
    },
)

# Each experiment: its Pax chain, most-derived first (Pax's MRO), then the defaults.
CHAINS = {
    # Pax's bases.
    model_params.TransformerLmPmapAdam: TRANSFORMER_LM_PMAP_ADAM,
    model_params.TransformerLmSpmdAdafactor: TRANSFORMER_LM_SPMD_ADAFACTOR,
    "tasks.lm.params.lm_cloud.LmCloudSpmd": LM_CLOUD_SPMD
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + SYNTHETIC_DATASET,
    "tasks.lm.params.c4.C4SpmdAdam": [C4_SPMD_ADAM, _adam_bases(PAXML)]
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + [C4_DATASET],
    c4_params.C4SpmdPipelineAdam: [
        C4_SPMD_PIPELINE_ADAM_03,
        _adam_bases(PAXML_03),
        PIPELINE_ADAFACTOR_03,
    ]
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + [C4_DATASET_03],
    c4_params.C4SpmdPipelineGpt3AdamOrgHP: GPT3_ORG_HP_03
    + [C4_SPMD_PIPELINE_ADAM_03, _adam_bases(PAXML_03), PIPELINE_ADAFACTOR_03]
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + [C4_DATASET_03],
    # Pax-named experiments.
    "tasks.lm.params.lm_cloud.LmCloudTransformerAdam": [LM_CLOUD_TRANSFORMER_ADAM]
    + TRANSFORMER_LM_PMAP_ADAM
    + SYNTHETIC_DATASET,
    "tasks.lm.params.lm_cloud.LmCloudTransformerAdamLimitSteps": [
        Layer(
            f"{PAXML} paxml/tasks/lm/params/lm_cloud.py LmCloudTransformerAdamLimitSteps",
            {"NUM_LAYERS": 10, "NUM_TRAIN_STEPS": 2000},  # task(): num_train_steps = 2000
        ),
        LM_CLOUD_TRANSFORMER_ADAM,
    ]
    + TRANSFORMER_LM_PMAP_ADAM
    + SYNTHETIC_DATASET,
    "tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps": [
        Layer(
            f"{PAXML} paxml/tasks/lm/params/lm_cloud.py LmCloudSpmd2BLimitSteps",
            {"NUM_TRAIN_STEPS": 300},  # task(): num_train_steps = 300
        )
    ]
    + LM_CLOUD_SPMD_2B
    + LM_CLOUD_SPMD
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + SYNTHETIC_DATASET,
    "tasks.lm.params.c4.C4Spmd1BAdam4Replicas": [
        _c4_sized("C4Spmd1BAdam4Replicas", 13, 2560, 20, 32, (1, 4, 1)),
        C4_SPMD_ADAM,
        _adam_bases(PAXML),
    ]
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + [C4_DATASET],
    "tasks.lm.params.c4.C4Spmd16BAdam32Replicas": [
        _c4_sized("C4Spmd16BAdam32Replicas", 36, 6144, 48, 16, (1, 16, 2)),
        C4_SPMD_ADAM,
        _adam_bases(PAXML),
    ]
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + [C4_DATASET],
    "tasks.lm.params.c4.C4SpmdPipelineGpt3SmallAdam64Replicas": [GPT3_SMALL_64]
    + GPT3_ORG_HP_03
    + [C4_SPMD_PIPELINE_ADAM_03, _adam_bases(PAXML_03), PIPELINE_ADAFACTOR_03]
    + TRANSFORMER_LM_SPMD_ADAFACTOR
    + [C4_DATASET_03],
}

# Our tiny CPU experiments sit on Pax's bases; what they change is theirs, for CPU size and speed.
_TINY = "ours: CPU size (a byte-level model that trains in about two minutes on 2 cores)"
TINY_DIFFERS = {
    "VOCAB_SIZE": _TINY,
    "NUM_LAYERS": _TINY,
    "MODEL_DIMS": _TINY,
    "HIDDEN_DIMS": _TINY,
    "NUM_HEADS": _TINY,
    "DIMS_PER_HEAD": _TINY,
    "NUM_KV_HEADS": _TINY,
    "SEQ_LEN": _TINY,
    "EMBEDDING_INIT_STD": "ours: MODEL_DIMS^-0.5 as Pax's softmax_init, at our MODEL_DIMS",
    "FPROP_DTYPE": "ours: float32 (CPUs have no fast bfloat16)",
    "REMAT_POLICY": "ours: cheaper without rematerialization at this size",
    "LAYER_SCAN_UNROLL": "ours: straight-line layers, faster on XLA:CPU (same math)",
    "LEARNING_RATE": "ours: a short run, with a higher peak",
    "LR_SCHEDULE": "ours: a short run, warmed up and decayed within its 150 steps",
    "LR_WARMUP_STEPS": "ours: a 150-step run",
    "LR_DECAY_START": "ours: a 150-step run",
    "LR_DECAY_END": "ours: a 150-step run",
    "NUM_TRAIN_STEPS": "ours: a 150-step run",
    "SUMMARY_EVERY_N_STEPS": "ours: a 150-step run",
    "EVAL_EVERY_N_STEPS": "ours: a 150-step run",
    "EVAL_NUM_BATCHES": "ours: 4 (2 for C4) fixed batches, cheaper than the whole split",
    "CHECKPOINT_EVERY_N_STEPS": "ours: a 150-step run",
    "ICI_MESH_SHAPE": "ours: -1 takes whatever devices there are",
    "DATA_SOURCE": "ours: the text every CPython ships",
    "PERCORE_BATCH_SIZE": _TINY,
    "USE_FP8": "ours: the FP8 variant",
}
CHAINS["tasks.lm.params.lm_cloud.LmCloudSpmdTiny"] = CHAINS["tasks.lm.params.lm_cloud.LmCloudSpmd"]
CHAINS["tasks.lm.params.c4.C4SpmdTinyAdam1Replica"] = CHAINS["tasks.lm.params.c4.C4SpmdAdam"]
TINY = ("LmCloudSpmdTiny", "C4SpmdTinyAdam1Replica", "LmCloudSpmdTinyFp8")

# Deliberate differences in the Pax-named experiments: (experiment class, attribute) -> reason.
DIFFERS = {
    ("LmCloudTransformerAdam", "ATTENTION_QUERY_CHUNK"): (
        "256 queries at a time (same math, tests/models/test_transformer.py): without remat, Pax's "
        "per-device plan is 61 GiB, over a v4 chip's 32; with it 21 GiB"
    ),
    ("LmCloudTransformerAdamLimitSteps", "ATTENTION_QUERY_CHUNK"): "inherited, as above",
    ("C4Spmd16BAdam32Replicas", "ATTENTION_QUERY_CHUNK"): (
        "256 queries at a time: 8.7 GiB less per device in the compiled step"
    ),
}
# The byte-level tiny run learns its attention within 150 steps only with these two of Pax's
# knobs (praxis's Xavier fans leave the fused QKV weight ~10x under 1/sqrt(D)).
for _tiny in ("LmCloudSpmdTiny", "LmCloudSpmdTinyFp8"):
    DIFFERS[(_tiny, "USE_ROTARY_POSITION_EMB")] = "ours: rotary on top of the sinusoidal positions"
    DIFFERS[(_tiny, "WEIGHT_INIT")] = "ours: Gaussian, as c4.py's GPT-3 and nvidia.py's configs"
    DIFFERS[(_tiny, "WEIGHT_INIT_SCALE")] = "ours: 1/sqrt(MODEL_DIMS)"

# Attributes with no Pax counterpart in these experiments: this project's own switches.
OURS_ONLY = {
    "ASYNC_CHECKPOINTING": "orbax's async save",
    "NAN_POLICY": "what to do on a non-finite step",
    "PMAP_USE_TENSORSTORE": "pmap checkpoints' format",
    "DATA_DIR": "where the local C4 copy is",
    "TOKENIZER_PATH": "where the SentencePiece model is",
    "BAD_RECORD_POLICY": "unreadable C4 records",
    "LAYER_SCAN_UNROLL": "nn.scan's unroll for repeated layers (Pax always loops)",
    "VOCAB_PAD_MULTIPLE": "tables padded so that `mdl` divides them (Pax split them unevenly)",
    "CPU_KERNELS": "forms of the same math with custom gradients: the capped softmax, XLA:CPU's",
    "ATTENTION_KERNEL": "jax's splash flash-attention kernel on TPU: the same math in blocks",
}

# Differences that are not an attribute's value.
NOTES = [
    "synthetic data: uniform random tokens, where Pax's SyntheticLmData gives all-ones batches",
    "C4 eval: the validation shards of a local C4 copy, packed like training rows; Pax read "
    "MLPerf's pre-tokenized validation set (5662 sequences), unpacked",
    "C4 vocabulary: TOKENIZER_PATH names the SentencePiece model; Pax's GPT runs used "
    "c4_en_301_5Mexp2_spm (gs://mlperf-llm-public2), its others a 32k model",
    "LayerNorm statistics in float32 (praxis: in the activations' dtype unless reductions_in_fp32)",
    "Adafactor's momentum kept in float32 (praxis: int8 by default, quantized_dtype)",
    "the QKV projection is one fused einsum and the embedding table [vocab, D] (praxis: [D, vocab])",
    "PER_CORE_BATCH_SIZE, which Pax's pipeline class misspelled, is a usage error here",
]


def _expected(key) -> dict:
    """{attribute: (value, source)}: the chain merged over the defaults, functions evaluated."""
    merged = {}
    for layer in reversed(PRAXIS_DEFAULTS):
        merged.update({k: (v, layer.source) for k, v in layer.values.items()})
    for layer in reversed(CHAINS[key]):
        merged.update({k: (v, layer.source) for k, v in layer.values.items()})
    plain = _pax_heads({k: v for k, (v, _) in merged.items() if not callable(v)})
    values = {k: (v(plain) if callable(v) else plain[k]) for k, (v, _) in merged.items()}
    return {k: (values[k], merged[k][1]) for k in merged}


def _experiment_class(key):
    return registry.get(key) if isinstance(key, str) else key


def _resolved_values(cls) -> dict:
    task = resolve(cls).task
    return {
        f.name.upper(): getattr(getattr(task, section), f.name)
        for section, record in config.SECTIONS.items()
        for f in dataclasses.fields(record)
    }


def _rows():
    for key in CHAINS:
        cls = _experiment_class(key)
        yield pytest.param(key, id=cls.__name__)
    for name in TINY:
        yield pytest.param(name, id=name)


@pytest.mark.parametrize("key", list(_rows()))
def test_resolved_values_are_paxs(key):
    cls = _experiment_class(key)
    name = cls.__name__
    chain_key = key
    if name in TINY:
        chain_key = (
            "tasks.lm.params.c4.C4SpmdAdam"
            if name.startswith("C4")
            else "tasks.lm.params.lm_cloud.LmCloudSpmd"
        )
        cls = registry.get(name)
    expected = _expected(chain_key)
    resolved = _resolved_values(cls)
    compared = set(expected) | set(OURS_ONLY)
    if isinstance(key, str):  # a registered experiment: every attribute has a Pax value or reason
        assert compared >= set(config.PARAMS), (
            f"no Pax value and no OURS_ONLY reason for {sorted(set(config.PARAMS) - compared)}"
        )
    mismatches = []
    for attr, (value, source) in expected.items():
        reason = DIFFERS.get((name, attr)) or (TINY_DIFFERS.get(attr) if name in TINY else None)
        if reason:
            continue
        if resolved[attr] != value:
            mismatches.append(f"{attr}: {resolved[attr]!r} here, {value!r} in {source}")
    assert not mismatches, "\n".join(mismatches)
    for (exp, attr), reason in DIFFERS.items():
        if exp == name:  # a difference that is no longer one must leave the table
            assert resolved[attr] != expected[attr][0], (attr, reason)


def praxis_param_count(e: dict) -> int:
    """Trainable parameters praxis's TransformerLm builds for values e, from its layers:
    SharedEmbeddingSoftmax      logits_ffn.linear.w [D, V] (+ bias.b [V] if has_bias)
    (SEPARATE_EMBEDDING)        Embedding.emb_var [V, D], FullSoftmax w [D, V] (+ [V])
    TrainablePositionalEmbedding  emb_var [max_seq_length, D]
    per Transformer layer:
      LayerNorm                 scale [D], bias [D]
      DotProductAttention       combined_qkv.w [3, D, N, H] (or q/k/v [D, N, H] each) +
                                b [3, N, H] with use_bias; post.w [D, N, H] + b [D];
                                per_dim_scale [H] with internal_enable_per_dim_scale
      TransformerFeedForward    LayerNorm [D] x 2; ffn_layer1 [D, F] (+ [F]); a gate layer
                                alike when gated; ffn_layer2 [F, D] (+ [D])
    final LayerNorm             [D] x 2
    """
    d, f, v = e["MODEL_DIMS"], e["HIDDEN_DIMS"], e["VOCAB_SIZE"]
    n, h = e["NUM_HEADS"], e["DIMS_PER_HEAD"]
    count = d * v + (v if e["SOFTMAX_HAS_BIAS"] else 0)
    if e["SEPARATE_EMBEDDING"]:
        count += v * d
    if e["POSITION_EMBEDDING"] == "learned":
        count += e["TRAINABLE_PE_MAX_SEQ_LEN"] * d
    attention = 4 * d * n * h + (3 * n * h + d if e["USE_BIAS"] else 0)
    attention += h if e["PER_DIM_SCALE"] else 0
    gated = e["ACTIVATION"] in ("swiglu", "geglu")
    ffn = (2 if gated else 1) * (d * f + (f if e["FFN_HAS_BIAS"] else 0))
    ffn += f * d + (d if e["FFN_HAS_BIAS"] else 0)
    layer = 2 * d + attention + 2 * d + ffn
    return count + e["NUM_LAYERS"] * layer + 2 * d


PAX_NAMED = [
    "LmCloudTransformerAdamLimitSteps",
    "LmCloudSpmd2BLimitSteps",
    "C4Spmd1BAdam4Replicas",
    "C4Spmd16BAdam32Replicas",
    "C4SpmdPipelineGpt3SmallAdam64Replicas",
    "LmCloudSpmdTiny",
]


@pytest.mark.parametrize("name", PAX_NAMED)
def test_parameter_count_is_what_praxis_builds(name):
    from pax.models.transformer import TransformerLm

    cls = registry.get(name)
    task = cls().task()
    stages = task.mesh.num_stages
    model = TransformerLm(task.model, num_stages=stages, num_microbatches=stages)
    abstract = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jax.numpy.zeros((stages, 8), "int32"))
    )
    ours = state_lib.num_params({"params": abstract["params"]}, task.model)
    key = registry.name_of(cls)
    expected = {
        k: v
        for k, (v, _) in _expected(
            CHAINS.get(key) and key or "tasks.lm.params.lm_cloud.LmCloudSpmd"
        ).items()
    }
    if name in TINY:  # its own sizes, praxis's layers
        expected.update(_resolved_values(cls))
    assert ours == praxis_param_count(expected)


def test_the_docs_list_every_deliberate_difference():
    page = (paths.ROOT / "docs" / "experiments.md").read_text()
    section = re.search(r"(?ms)^## Fidelity to Pax\n(.*?)(?=^## |\Z)", page)
    assert section, "docs/experiments.md needs a '## Fidelity to Pax' section"
    text = section.group(1)
    for exp, attr in DIFFERS:
        assert re.search(rf"{exp}.*{attr}|{attr}.*{exp}", text), (exp, attr)
    for note in NOTES:
        assert note.split(":")[0].split(",")[0] in text, note
    assert "LmCloudSpmdTiny" in text and "C4SpmdTinyAdam1Replica" in text
