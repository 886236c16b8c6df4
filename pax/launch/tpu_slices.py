"""TPU slices by name: the one table that `./noxw -s aot -- --tpu`, `./noxw -s cluster -- RELEASE
tpu --tpu` and the docs read, so every command takes the same spellings.

A slice is a TPU generation and a number of chips. For TPU v5e with 32 chips each command takes

    v5litepod-32            Cloud TPU's accelerator type (gcloud's --accelerator-type, a TPU VM's
                            TPU_ACCELERATOR_TYPE): the canonical name, the one recorded
    v5e-32                  the chip's name with the same count
    v5e, v5litepod, tpu-v5-lite-podslice
                            the generation alone (the last is GKE's accelerator label): as many
                            chips as the experiment's mesh

The count is Cloud TPU's: TensorCores on v4 and v5p (two a chip: v4-64 is 32 chips), chips on
v5e and v6e.
"""

from __future__ import annotations

import dataclasses
import math

from pax.errors import UsageError

# Markers of the docs' copy of the table (pax.docs.blocks rewrites what lies between them).
DOCS_START = "<!-- tpu-slices:start -->"
DOCS_END = "<!-- tpu-slices:end -->"


@dataclasses.dataclass(frozen=True)
class Generation:
    chip: str  # the chip's name: v5e
    accelerator: str  # Cloud TPU's accelerator-type prefix: v5litepod
    gke: str  # GKE's cloud.google.com/gke-tpu-accelerator label
    cores_per_chip: int  # what the accelerator type's count counts per chip
    rank: int  # dimensions of the slice's topology

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling of the generation, the chip's name first."""
        return tuple(dict.fromkeys((self.chip, self.accelerator, self.gke)))


GENERATIONS = (
    Generation("v4", "v4", "tpu-v4-podslice", 2, 3),
    Generation("v5e", "v5litepod", "tpu-v5-lite-podslice", 1, 2),
    Generation("v5p", "v5p", "tpu-v5p-slice", 2, 3),
    Generation("v6e", "v6e", "tpu-v6e-slice", 1, 2),
)
_BY_NAME = {name: g for g in GENERATIONS for name in g.names}


@dataclasses.dataclass(frozen=True)
class Slice:
    generation: Generation
    chips: int | None  # None: the generation alone, as many chips as the mesh

    @property
    def name(self) -> str:
        """The canonical name: Cloud TPU's accelerator type (`v5litepod-32`), or the chip's
        name for a generation alone."""
        if self.chips is None:
            return self.generation.chip
        return f"{self.generation.accelerator}-{self.chips * self.generation.cores_per_chip}"

    @property
    def topology(self) -> str:
        """The chips' arrangement as Cloud TPU and GKE write it: v4-64 `2x4x4`, v5litepod-32 `4x8`."""
        return shape(self.chips, self.generation.rank)

    def sized(self, chips: int) -> Slice:
        """This generation's slice of `chips` chips."""
        _check_chips(self.generation, chips, f"{self.generation.chip} with {chips} chips")
        return Slice(self.generation, chips)


def shape(chips: int, rank: int) -> str:
    """One host is 2x2(x1); each doubling grows the smallest axis, the last one among equals,
    which gives Cloud TPU's shapes (v4: 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, ...; v5e: 2x2, 2x4,
    4x4, 4x8, ...); one chip is 1x1(x1)."""
    dims = [1] * rank if chips == 1 else [2, 2, 1][:rank]
    while math.prod(dims) < chips:
        smallest = min(dims)
        dims[max(i for i, d in enumerate(dims) if d == smallest)] *= 2
    return "x".join(map(str, dims))


def accepted() -> str:
    """The spellings, for a refusal's one line."""
    return "; ".join(
        f"{'|'.join(g.names)} or {g.accelerator}-N"
        + (f"/{g.chip}-N" if g.chip != g.accelerator else "")
        + (" (N TensorCores, two a chip)" if g.cores_per_chip == 2 else " (N chips)")
        for g in GENERATIONS
    )


def parse(spelling: str) -> Slice:
    """Any accepted spelling -> Slice; UsageError naming what is accepted."""
    if spelling in _BY_NAME:
        return Slice(_BY_NAME[spelling], None)
    prefix, _, count = spelling.rpartition("-")
    generation = _BY_NAME.get(prefix)
    if generation is None or prefix == generation.gke or not count.isdigit() or int(count) < 1:
        raise UsageError(f"unknown TPU slice {spelling!r}; accepted: {accepted()}")
    cores = int(count)
    if cores % generation.cores_per_chip:
        raise UsageError(
            f"TPU slice {spelling!r}: {generation.accelerator} counts TensorCores, "
            f"{generation.cores_per_chip} a chip; e.g. {generation.accelerator}-8 is 4 chips"
        )
    chips = cores // generation.cores_per_chip
    _check_chips(generation, chips, spelling)
    return Slice(generation, chips)


def _check_chips(generation: Generation, chips: int, what: str) -> None:
    if chips != 1 and (chips < 4 or chips & (chips - 1)):
        per_chip = generation.cores_per_chip
        raise UsageError(
            f"TPU slice {what!r} has {chips} chips; a slice here has 1 chip or a power of two "
            f"from 4 (e.g. {generation.accelerator}-{4 * per_chip}, "
            f"{generation.accelerator}-{8 * per_chip})"
        )


def docs_table() -> str:
    """The table as the docs show it."""
    lines = [
        "| chip | Cloud TPU accelerator type (canonical) | short | GKE accelerator | the count N |",
        "|---|---|---|---|---|",
    ]
    for g in GENERATIONS:
        count = "TensorCores, two a chip" if g.cores_per_chip == 2 else "chips"
        example = Slice(g, 32)
        short = f"`{g.chip}-N`" if g.chip != g.accelerator else "(the same)"
        lines.append(
            f"| {g.chip} | `{g.accelerator}-N` (`{example.name}`: {example.chips} chips, "
            f"`{example.topology}`) | {short} | `{g.gke}` | {count} |"
        )
    return "\n".join(lines)
