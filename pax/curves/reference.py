"""Reference bands: what a healthy run of an experiment looks like, from several real runs.

A reference JSON (shipped ones live in pax/curves/references/<Experiment>.json) keeps every
recorded run's curves with where it came from (the command, release, lockfile sha256), and
the band derived from them, per split and metric, at each step all runs logged:

  minmax   [min, max] across the runs (default)
  std      mean ± k·std (sample std at that step) across the runs

and sigma, the seed-to-seed standard deviation of the curve pooled over all its steps
(residuals from the per-step mean, one degree of freedom per step spent on the mean). Three
seeds show little of the spread at any one step, while the pooled sigma is estimated from
every point; compare widens the band by a multiple of it.

The stored band is recomputed from the stored runs on load; a mismatch means the file was
edited by hand and is refused. Re-record with `./noxw -s references`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from pax.curves.runs import CurvesError

SCHEMA = 1
METRICS = ("loss", "log_pplx")
BAND_KINDS = ("minmax", "std")
REFERENCES_DIR = Path(__file__).resolve().parent / "references"


@dataclasses.dataclass
class Band:
    split: str
    metric: str
    steps: list[int]
    lo: list[float]
    hi: list[float]
    mean: list[float]
    sigma: float = 0.0  # pooled seed-to-seed std of this curve (0 with one run)

    def at(self, step: int) -> tuple[float, float] | None:
        try:
            i = self.steps.index(step)
        except ValueError:
            return None
        return self.lo[i], self.hi[i]

    def to_json(self) -> dict:
        return {
            "steps": self.steps,
            "lo": self.lo,
            "hi": self.hi,
            "mean": self.mean,
            "sigma": self.sigma,
        }


def _stats(values: list[float]) -> tuple[float, float, float, float]:
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return min(values), max(values), mean, std


def make_band(
    curves: list[dict], kind: str = "minmax", k: float = 2.0, metrics: tuple[str, ...] = METRICS
) -> dict[tuple[str, str], Band]:
    """Bands from several runs' curves (curves[split][metric] = {step: value}).

    A band covers the splits and metrics every run has, at the steps every run logged;
    a non-finite value in any run is refused (a reference must be a healthy run).
    """
    if kind not in BAND_KINDS:
        raise CurvesError(f"unknown band kind {kind!r}; kinds: {', '.join(BAND_KINDS)}")
    if not curves:
        raise CurvesError("a band needs at least one run")
    bands: dict[tuple[str, str], Band] = {}
    splits = set(curves[0]).intersection(*curves[1:])
    for split in sorted(splits, key=lambda s: (s != "train", s)):
        for metric in metrics:
            series = [c[split].get(metric) for c in curves]
            if any(s is None for s in series):
                continue
            steps = sorted(set(series[0]).intersection(*series[1:]))
            lo, hi, mean = [], [], []
            squares, dof = 0.0, 0
            for step in steps:
                values = [float(s[step]) for s in series]
                if not all(math.isfinite(v) for v in values):
                    raise CurvesError(
                        f"{split} {metric} at step {step} is not finite in a "
                        f"reference run: {values}"
                    )
                vmin, vmax, vmean, vstd = _stats(values)
                squares += sum((v - vmean) ** 2 for v in values)
                dof += len(values) - 1
                if kind == "minmax":
                    lo.append(vmin)
                    hi.append(vmax)
                else:
                    lo.append(vmean - k * vstd)
                    hi.append(vmean + k * vstd)
                mean.append(vmean)
            if steps:
                sigma = math.sqrt(squares / dof) if dof else 0.0
                bands[(split, metric)] = Band(split, metric, steps, lo, hi, mean, sigma)
    if not bands:
        raise CurvesError("the runs share no split, metric and step to make a band from")
    return bands


def _curves_to_json(curves: dict) -> dict:
    return {
        split: {
            metric: {str(step): value for step, value in sorted(series.items())}
            for metric, series in by_metric.items()
        }
        for split, by_metric in curves.items()
    }


def _curves_from_json(data, where: str) -> dict:
    if not isinstance(data, dict) or not data:
        raise CurvesError(f"{where}: curves must be a non-empty object")
    curves = {}
    for split, by_metric in data.items():
        if not isinstance(by_metric, dict):
            raise CurvesError(f"{where}: curves.{split} must be an object")
        for metric, series in by_metric.items():
            if not isinstance(series, dict):
                raise CurvesError(f"{where}: curves.{split}.{metric} must map step to value")
            try:
                curves.setdefault(split, {})[metric] = {int(s): float(v) for s, v in series.items()}
            except (TypeError, ValueError):
                raise CurvesError(
                    f"{where}: curves.{split}.{metric} has a step or value that is not a number"
                ) from None
    return curves


@dataclasses.dataclass
class Reference:
    """Recorded runs of one experiment and the band they make."""

    name: str
    experiment: str
    runs: list[dict]  # metadata + "curves" per recorded run
    band_kind: str = "minmax"
    k: float = 2.0
    recorded_by: str = ""  # the command that recorded the whole file
    recorded_at: str = ""
    source: str = ""  # where it was loaded from
    bands: dict[tuple[str, str], Band] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not self.bands:
            self.bands = make_band([r["curves"] for r in self.runs], self.band_kind, self.k)

    def band(self, split: str, metric: str) -> Band | None:
        return self.bands.get((split, metric))

    def splits(self) -> list[str]:
        return sorted({s for s, _ in self.bands}, key=lambda s: (s != "train", s))

    def to_json(self) -> dict:
        bands: dict = {}
        for (split, metric), band in self.bands.items():
            bands.setdefault(split, {})[metric] = band.to_json()
        return {
            "schema": SCHEMA,
            "name": self.name,
            "experiment": self.experiment,
            "recorded_by": self.recorded_by,
            "recorded_at": self.recorded_at,
            "band": {
                "kind": self.band_kind,
                "k": self.k if self.band_kind == "std" else None,
                "note": "band per split/metric at the steps all runs logged",
            },
            "bands": bands,
            "runs": [
                {
                    **{k: v for k, v in r.items() if k != "curves"},
                    "curves": _curves_to_json(r["curves"]),
                }
                for r in self.runs
            ],
        }

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)  # never a half-written reference
        return path

    @classmethod
    def from_json(cls, data, where: str) -> "Reference":
        if not isinstance(data, dict):
            raise CurvesError(f"{where}: not a reference (a JSON object is expected)")
        if data.get("schema") != SCHEMA:
            raise CurvesError(
                f"{where}: reference schema {data.get('schema')!r}, this Pax reads {SCHEMA}"
            )
        for key in ("name", "experiment"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise CurvesError(f"{where}: {key!r} missing")
        runs = data.get("runs")
        if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
            raise CurvesError(f"{where}: 'runs' must be a non-empty list of recorded runs")
        band = data.get("band") or {}
        kind = band.get("kind", "minmax")
        k = band.get("k") if band.get("k") is not None else 2.0
        loaded = [
            {**r, "curves": _curves_from_json(r.get("curves"), f"{where}: run {i}")}
            for i, r in enumerate(runs)
        ]
        ref = cls(
            name=data["name"],
            experiment=data["experiment"],
            runs=loaded,
            band_kind=kind,
            k=float(k),
            recorded_by=data.get("recorded_by", ""),
            recorded_at=data.get("recorded_at", ""),
            source=where,
        )
        stored = data.get("bands")
        if stored is not None and _bands_json(stored) != _bands_json(ref.to_json()["bands"]):
            raise CurvesError(
                f"{where}: the stored band does not match the stored runs "
                f"(edited by hand?); re-record with ./noxw -s references"
            )
        return ref


def _bands_json(bands) -> str:
    # Compare at 9 significant digits: JSON round trips floats exactly, but be lenient.
    def rounded(x):
        if isinstance(x, float):
            return float(f"{x:.9g}")
        if isinstance(x, list):
            return [rounded(v) for v in x]
        if isinstance(x, dict):
            return {k: rounded(v) for k, v in x.items()}
        return x

    return json.dumps(rounded(bands), sort_keys=True)


def reference_names() -> list[str]:
    """The references shipped with the package."""
    return sorted(p.stem for p in REFERENCES_DIR.glob("*.json"))


def load_reference(name: str | Path) -> Reference:
    """A shipped reference by experiment name (`LmCloudSpmdTiny`, or the dotted name), or a
    reference JSON file by path."""
    text = str(name)
    path = Path(text)
    if text.endswith(".json") or "/" in text or path.is_file():
        where = text
    else:
        short = text.rsplit(".", 1)[-1]
        names = reference_names()
        if short not in names:
            raise CurvesError(
                f"unknown reference {text!r}; shipped: "
                f"{', '.join(names) or 'none'} (or give a reference .json path)"
            )
        path = REFERENCES_DIR / f"{short}.json"
        where = f"reference {short}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CurvesError(f"{where}: no such reference file") from None
    except OSError as err:
        raise CurvesError(f"{where}: cannot read ({err.strerror or err})") from None
    except ValueError as err:
        raise CurvesError(f"{where}: not valid JSON ({err})") from None
    return Reference.from_json(data, where)


def reference_for(experiment: str | None) -> str | None:
    """The shipped reference for a run's experiment, if there is one."""
    if not experiment:
        return None
    short = experiment.rsplit(".", 1)[-1]
    return short if short in reference_names() else None
