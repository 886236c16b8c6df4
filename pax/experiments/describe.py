"""Resolved experiments as text: `--list_experiments` (one line each) and `--describe EXP`
(every hyper-parameter with its value and where it came from)."""

import dataclasses

from pax.experiments import base, config, registry


def summary(experiment_cls) -> str:
    """One line: model shape, sequence, vocabulary, optimizer, mesh."""
    t = base.resolve(experiment_cls).task
    m, o, mesh = t.model, t.optimizer, t.mesh
    where = "pmap" if mesh.ici_mesh_shape is None else f"mesh {list(mesh.ici_mesh_shape)}"
    stages = f", {mesh.num_stages} stages" if mesh.num_stages > 1 else ""
    return (
        f"{m.num_layers} x {m.model_dims} ({m.num_heads} heads x {m.dims_per_head}, FFN "
        f"{m.hidden_dims}), seq {m.seq_len}, vocab {m.vocab_size}, {o.optimizer} lr "
        f"{o.learning_rate:g}, {where}{stages}, {t.data.data_source}"
    )


def list_experiments() -> str:
    names = registry.names()
    width = max(len(n) for n in names)
    return "\n".join(f"{n:<{width}}  {summary(registry.get(n))}" for n in names)


def describe(experiment_cls, name: str) -> str:
    """Every hyper-parameter of the resolved experiment: value, then where it came from
    ('default': BaseExperiment's declared default; 'class X': set by class X; '--set': an
    override; 'derived: ...': computed from others), then the Pax name where it differs."""
    resolved = base.resolve(experiment_cls)
    lines = [f"{name}  ({summary(experiment_cls)})"]
    for section, record in config.SECTIONS.items():
        lines.append(f"{section}:")
        values = getattr(resolved.task, section)
        for f in dataclasses.fields(record):
            key = f.name.upper()
            pax = config.PARAMS[key].pax
            note = f"  [Pax: {pax}]" if pax and pax != key else ""
            value = repr(getattr(values, f.name))
            lines.append(f"  {key:<28} {value:<34} {resolved.sources[key]}{note}")
    return "\n".join(lines)
