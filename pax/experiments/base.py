"""The base experiment, and how an experiment class becomes resolved configuration.

An experiment is a class; its upper-case attributes are hyper-parameters, each declared once in
pax.experiments.config (type, default, allowed values, doc). BaseExperiment carries every
declared default (praxis's layer defaults and paxml's task defaults where they have one); Pax's
own bases (pax/tasks/lm/model_params.py, ...) and the experiments override them by subclassing,
as in Pax. `resolve` reads a class through the declarations: an attribute nobody declared (a
typo, or a Pax name spelled differently here) and a value of the wrong type or outside its
allowed values are usage errors, found before anything runs.
"""

import dataclasses
import difflib
import math
import os
import types
import typing
from typing import Any

from pax.errors import UsageError
from pax.experiments import config
from pax.experiments.config import PARAMS

# Marks the class pax.experiments.overrides derives for --set, so provenance can name it.
OVERRIDES_ATTR = "_pax_overrides"
DEFAULT = "default"
OVERRIDE = "--set"

# Pax's attribute names that are spelled differently here, for the unknown-attribute hint.
PAX_NAMES = {p.pax: p.name for p in PARAMS.values() if p.pax.isupper() and p.pax.isidentifier()}


class BaseExperiment:
    """Every hyper-parameter at its declared default (see pax.experiments.config)."""

    def task(self) -> config.TaskConfig:
        return resolve(type(self)).task

    def datasets(self) -> list[config.DatasetConfig]:
        """The training split first, then the eval splits."""
        return datasets(self.task())


for _param in PARAMS.values():
    setattr(BaseExperiment, _param.name, _param.default)
del _param


@dataclasses.dataclass(frozen=True)
class Resolved:
    task: config.TaskConfig
    # NAME -> where its value came from: 'default', 'class NAME', '--set' or 'derived: ...'.
    sources: dict


def hyper_parameters(experiment_cls) -> dict:
    """Every upper-case attribute of the class and its bases."""
    return {name: getattr(experiment_cls, name) for name in dir(experiment_cls) if _is_hp(name)}


def _is_hp(name: str) -> bool:
    return name.isupper() and not name.startswith("_")


def unknown_hint(name: str) -> str:
    """'; did you mean ...' for an undeclared attribute name."""
    if name in PAX_NAMES:
        return f"; Pax's {name} is {PAX_NAMES[name]} here"
    close = difflib.get_close_matches(name.upper(), list(PARAMS), n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def source_of(experiment_cls, name: str) -> str:
    for klass in experiment_cls.__mro__:
        if name in vars(klass):
            if klass is BaseExperiment:
                return DEFAULT
            if OVERRIDES_ATTR in vars(klass):
                return OVERRIDE
            return f"class {klass.__qualname__}"
    return DEFAULT


def _type_name(tp) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return f"{_type_name(inner[0])} or None"
    if typing.get_origin(tp) is tuple:
        return f"a list of {typing.get_args(tp)[0].__name__}"
    return {int: "an int", float: "a float", bool: "a bool (True or False)", str: "a string"}[tp]


def check(param: config.Param, value: Any) -> Any:
    """`value` as the declared type (ints are floats where floats are declared, lists tuples);
    ValueError with what was expected otherwise."""
    tp = param.type
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType)
    if optional:
        if value is None:
            return None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    value = _coerce(tp, value)
    if value is _BAD:
        raise ValueError(f"is not {_type_name(param.type)}")
    if param.choices and value not in param.choices:
        raise ValueError(f"is not one of {', '.join(map(str, param.choices))}")
    if param.minimum is not None and value < param.minimum:
        raise ValueError(f"is below the minimum {param.minimum}")
    return value


_BAD = object()


def _coerce(tp, value):
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)):
            return _BAD
        elem = typing.get_args(tp)[0]
        items = tuple(_coerce(elem, v) for v in value)
        return _BAD if any(i is _BAD for i in items) else items
    if tp is bool:
        return value if isinstance(value, bool) else _BAD
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _BAD
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _BAD
    if tp is str:
        return value if isinstance(value, str) else _BAD
    raise TypeError(f"undeclarable type {tp}")


def resolve(experiment_cls) -> Resolved:
    """The experiment's TaskConfig and each value's provenance; UsageError on bad input."""
    name = experiment_cls.__qualname__
    unknown = sorted(n for n in hyper_parameters(experiment_cls) if n not in PARAMS)
    if unknown:
        where = source_of(experiment_cls, unknown[0])
        raise UsageError(
            f"{name}: {unknown[0]} ({where}) is not a hyper-parameter{unknown_hint(unknown[0])}"
            + (f" (also unknown: {', '.join(unknown[1:])})" if unknown[1:] else "")
        )
    values, sources = {}, {}
    for key, param in PARAMS.items():
        sources[key] = source_of(experiment_cls, key)
        try:
            values[key] = check(param, getattr(experiment_cls, key))
        except ValueError as e:
            raise UsageError(
                f"{name}: {key} = {getattr(experiment_cls, key)!r} ({sources[key]}) {e}; "
                f"{param.doc}"
            ) from None
    _derive(values, sources)
    _cross_check(name, values)
    sections = {
        section: record(**{f.name: values[f.name.upper()] for f in dataclasses.fields(record)})
        for section, record in config.SECTIONS.items()
    }
    return Resolved(config.TaskConfig(**sections), sources)


def _derive(v: dict, sources: dict) -> None:
    """Fills the values whose None means 'follow another one', noting where they came from."""

    def derive(key, value, how):
        if v[key] is None:
            v[key], sources[key] = value, f"derived: {how}"

    if v["NUM_HEADS"] is None and v["DIMS_PER_HEAD"] is None:
        raise UsageError("set NUM_HEADS or DIMS_PER_HEAD (both are None)")
    if None not in (v["NUM_HEADS"], v["DIMS_PER_HEAD"]) and (
        v["NUM_HEADS"] * v["DIMS_PER_HEAD"] != v["MODEL_DIMS"]
    ):
        # paxml's TransformerLmSpmdAdafactor.task asserts the same.
        raise UsageError(
            f"NUM_HEADS={v['NUM_HEADS']} x DIMS_PER_HEAD={v['DIMS_PER_HEAD']} != MODEL_DIMS="
            f"{v['MODEL_DIMS']}; set one of NUM_HEADS and DIMS_PER_HEAD to None to derive it"
        )
    if v["NUM_HEADS"] is None:
        if v["MODEL_DIMS"] % v["DIMS_PER_HEAD"]:
            raise UsageError(
                f"MODEL_DIMS={v['MODEL_DIMS']} is not a multiple of DIMS_PER_HEAD="
                f"{v['DIMS_PER_HEAD']}; set NUM_HEADS"
            )
        derive("NUM_HEADS", v["MODEL_DIMS"] // v["DIMS_PER_HEAD"], "MODEL_DIMS // DIMS_PER_HEAD")
    derive("DIMS_PER_HEAD", v["MODEL_DIMS"] // v["NUM_HEADS"], "MODEL_DIMS // NUM_HEADS")
    derive("NUM_KV_HEADS", v["NUM_HEADS"], "NUM_HEADS")
    # Pax's softmax_init: WeightInit.Gaussian(1.0 / math.sqrt(MODEL_DIMS)).
    derive("EMBEDDING_INIT_STD", 1.0 / math.sqrt(v["MODEL_DIMS"]), "1 / sqrt(MODEL_DIMS)")
    derive("TRAINING_SEED", v["SEED"], "SEED")


def _cross_check(name: str, v: dict) -> None:
    def fail(message):
        raise UsageError(f"{name}: {message}")

    if v["NUM_HEADS"] % v["NUM_KV_HEADS"]:
        fail(f"NUM_HEADS={v['NUM_HEADS']} is not a multiple of NUM_KV_HEADS={v['NUM_KV_HEADS']}")
    if v["USE_ROTARY_POSITION_EMB"] and v["DIMS_PER_HEAD"] % 2:
        fail(f"rotary positions need an even DIMS_PER_HEAD, not {v['DIMS_PER_HEAD']}")
    chunk = v["ATTENTION_QUERY_CHUNK"]
    if chunk and v["SEQ_LEN"] % chunk:
        fail(f"ATTENTION_QUERY_CHUNK={chunk} does not divide SEQ_LEN={v['SEQ_LEN']}")
    if v["ATTENTION_KERNEL"] == "splash" and v["SEQ_LEN"] % 128:
        fail(
            f"ATTENTION_KERNEL=splash needs a SEQ_LEN that is a multiple of 128, not "
            f"{v['SEQ_LEN']}; use --set ATTENTION_KERNEL=xla"
        )
    if v["POSITION_EMBEDDING"] == "learned" and v["SEQ_LEN"] > v["TRAINABLE_PE_MAX_SEQ_LEN"]:
        fail(
            f"SEQ_LEN={v['SEQ_LEN']} exceeds TRAINABLE_PE_MAX_SEQ_LEN={v['TRAINABLE_PE_MAX_SEQ_LEN']}"
        )
    if not v["LR_WARMUP_STEPS"] <= v["LR_DECAY_START"] <= v["LR_DECAY_END"]:
        fail(
            "the schedule needs LR_WARMUP_STEPS <= LR_DECAY_START <= LR_DECAY_END, got "
            f"{v['LR_WARMUP_STEPS']}, {v['LR_DECAY_START']}, {v['LR_DECAY_END']}"
        )
    names, ici, dcn = v["MESH_AXIS_NAMES"], v["ICI_MESH_SHAPE"], v["DCN_MESH_SHAPE"]
    for key, shape in (("ICI_MESH_SHAPE", ici), ("DCN_MESH_SHAPE", dcn)):
        if shape is not None and len(shape) != len(names):
            fail(f"{key}={list(shape)} needs {len(names)} entries, one per axis of {list(names)}")
    if ici is not None and (ici.count(-1) > 1 or any(s < 1 and s != -1 for s in ici)):
        fail(f"ICI_MESH_SHAPE={list(ici)}: sizes are >= 1, and at most one -1 (the rest)")
    if dcn is not None and any(s < 1 for s in dcn):
        fail(f"DCN_MESH_SHAPE={list(dcn)}: sizes are >= 1")
    if v["NUM_STAGES"] > 1:
        if ici is None:
            fail(
                f"NUM_STAGES={v['NUM_STAGES']} needs an ICI_MESH_SHAPE with a `stage` axis; "
                "without one the experiment runs data-parallel through pmap"
            )
        if "stage" not in names:
            fail(f"NUM_STAGES={v['NUM_STAGES']} needs a `stage` axis in MESH_AXIS_NAMES")
        given = [k for k in ("NUM_MICROBATCHES", "MICROBATCH_SIZE") if v[k] is not None]
        if len(given) != 1:
            fail(
                "a pipeline needs exactly one of NUM_MICROBATCHES and MICROBATCH_SIZE, "
                f"got {' and '.join(given) or 'neither'}"
            )
        if v["NUM_LAYERS"] % v["NUM_STAGES"]:
            fail(
                f"NUM_LAYERS={v['NUM_LAYERS']} does not split into NUM_STAGES={v['NUM_STAGES']} equal stages"
            )
    if v["EVAL_NUM_BATCHES"] is None and v["DATA_SOURCE"] == "synthetic":
        fail(
            "synthetic data has no end, so EVAL_NUM_BATCHES=None (the whole split) never ends; "
            "set EVAL_NUM_BATCHES"
        )


def datasets(task: config.TaskConfig) -> list[config.DatasetConfig]:
    """The splits the task reads: training first, then the eval split."""
    d = task.data
    common = dict(
        source=d.data_source,
        seq_len=task.model.seq_len,
        data_dir=d.data_dir or os.environ.get("C4_DATA_DIR"),
        tokenizer_path=d.tokenizer_path,
        bad_record_policy=d.bad_record_policy,
    )
    return [
        config.DatasetConfig(name="train", is_training=True, seed=d.training_seed, **common),
        config.DatasetConfig(
            name=d.data_source,
            is_training=False,
            seed=d.eval_seed,
            whole_split=task.train.eval_num_batches is None,
            **common,
        ),
    ]
