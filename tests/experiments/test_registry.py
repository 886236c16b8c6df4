import pytest

from pax.errors import UsageError
from pax.experiments import overrides, registry
from pax.experiments.config import TaskConfig

REFERENCE = [
    "tasks.lm.params.lm_cloud.LmCloudSpmdTiny",
    "tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps",
    "tasks.lm.params.lm_cloud.LmCloudTransformerAdamLimitSteps",
    "tasks.lm.params.c4.C4Spmd1BAdam4Replicas",
    "tasks.lm.params.c4.C4Spmd16BAdam32Replicas",
    "tasks.lm.params.c4.C4SpmdPipelineGpt3SmallAdam64Replicas",
]


@pytest.mark.parametrize("name", REFERENCE)
def test_reference_experiments_resolve(name):
    experiment = registry.get(name)()
    task = experiment.task()
    assert isinstance(task, TaskConfig)
    datasets = experiment.datasets()
    assert [d.is_training for d in datasets][0]
    assert registry.name_of(type(experiment)) == name


def test_pax_hyper_parameters_of_the_1b_run():
    task = registry.get("C4Spmd1BAdam4Replicas")().task()
    m, o = task.model, task.optimizer
    assert (m.num_layers, m.model_dims, m.hidden_dims, m.num_heads, m.dims_per_head) == (
        13,
        2560,
        10240,
        20,
        128,
    )
    assert (o.learning_rate, o.adam_epsilon, o.clip_gradient_norm_to_value, o.weight_decay) == (
        1e-3,
        1e-6,
        5.0,
        1e-3,
    )
    assert task.mesh.ici_mesh_shape == (1, 4, 1)
    assert task.train.checkpoint_every_n_steps == 1000
    gpt3 = registry.get("C4SpmdPipelineGpt3SmallAdam64Replicas")().task()
    assert gpt3.train.percore_batch_size == 1  # what Pax really ran (see the class docstring)
    assert gpt3.mesh.mesh_axis_names == ("stage", "replica", "data", "mdl")
    assert gpt3.model.vocab_size == 50257 and gpt3.model.position_embedding == "learned"


def test_lookup_by_full_name_suffix_and_pax_prefix():
    cls = registry.get("tasks.lm.params.lm_cloud.LmCloudSpmdTiny")
    assert registry.get("lm_cloud.LmCloudSpmdTiny") is cls
    assert registry.get("LmCloudSpmdTiny") is cls
    assert registry.get("pax.tasks.lm.params.lm_cloud.LmCloudSpmdTiny") is cls


def test_unknown_experiment_names_the_closest():
    with pytest.raises(UsageError, match="closest: .*LmCloudSpmdTiny"):
        registry.get("LmCloudSpmdTinny")


def test_partial_word_is_not_a_suffix_match():
    with pytest.raises(UsageError, match="unknown experiment"):
        registry.get("SpmdTiny")


def test_overrides_are_typed():
    cls = registry.get("LmCloudSpmdTiny")
    derived = overrides.apply(
        cls,
        [
            "NUM_LAYERS=2",
            "LEARNING_RATE=3e-4",
            "ICI_MESH_SHAPE=[1,8,1]",
            "DATA_SOURCE=synthetic",
            "ASYNC_CHECKPOINTING=false",
            "WEIGHT_DECAY=0",
        ],
    )
    assert derived.NUM_LAYERS == 2 and isinstance(derived.NUM_LAYERS, int)
    assert derived.LEARNING_RATE == 3e-4
    assert derived.ICI_MESH_SHAPE == (1, 8, 1)
    assert derived.DATA_SOURCE == "synthetic"
    assert derived.ASYNC_CHECKPOINTING is False
    assert derived.WEIGHT_DECAY == 0.0 and isinstance(derived.WEIGHT_DECAY, float)
    assert cls.NUM_LAYERS == 4, "the registered class must stay untouched"
    assert registry.name_of(derived) == registry.name_of(cls)


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("NUM_LAYER=2", "unknown hyper-parameter 'NUM_LAYER'.*did you mean NUM_LAYERS"),
        ("NUM_LAYERS=2.5", "bad value for NUM_LAYERS: 2.5 is not an int"),
        ("NUM_LAYERS=two", "bad value for NUM_LAYERS: 'two' is not an int"),
        ("LEARNING_RATE=fast", "is not a float"),
        ("ICI_MESH_SHAPE=4", "is not a list"),
        ("ICI_MESH_SHAPE=[1,2.5,1]", "is not a list of int"),
        ("USE_REPEATED_LAYER=maybe", "is not a bool"),
        ("NUM_LAYERS", "write --set KEY=VALUE"),
    ],
)
def test_bad_overrides(assignment, message):
    with pytest.raises(UsageError, match=message):
        overrides.apply(registry.get("LmCloudSpmdTiny"), [assignment])
