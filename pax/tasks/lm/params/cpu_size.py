"""What the CPU-sized experiments share: a byte-level 4 x 256 LM, f32, 150 short steps.

Not an experiment itself (not registered): LmCloudSpmdTiny and C4SpmdTinyAdam1Replica mix it
in ahead of their Pax base, so its numbers win and the base supplies the rest (the model's
layers, the optimizer). These are ours, not Pax's; tests/tasks/test_fidelity.py lists each
value that differs from the Pax base and why.
"""


class CpuSizedLm:
    VOCAB_SIZE = 256
    NUM_LAYERS = 4
    MODEL_DIMS = 256
    HIDDEN_DIMS = 1024
    NUM_HEADS = 4
    DIMS_PER_HEAD = None  # MODEL_DIMS // NUM_HEADS, also in subclasses that change either
    SEQ_LEN = 128
    PERCORE_BATCH_SIZE = 16
    ICI_MESH_SHAPE = (1, -1, 1)  # -1: every device there is, data-parallel
    FPROP_DTYPE = "float32"  # CPUs have no fast bfloat16
    REMAT_POLICY = "none"  # cheaper than rematerializing at this size
    # The stacked layers as straight-line code (same math and parameters): XLA:CPU runs them
    # faster than a scan loop.
    LAYER_SCAN_UNROLL = 4
    LEARNING_RATE = 3e-3
    LR_SCHEDULE = "linear_rampup_cosine_decay"
    LR_WARMUP_STEPS = 20
    LR_DECAY_START = 20
    LR_DECAY_END = 150
    NUM_TRAIN_STEPS = 150
    SUMMARY_EVERY_N_STEPS = 10
    EVAL_EVERY_N_STEPS = 50
    CHECKPOINT_EVERY_N_STEPS = 50
