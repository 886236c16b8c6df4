"""Reference bands: what healthy runs of one experiment and config look like, from many seeds.

A reference JSON (shipped ones live in pax/curves/references/<Experiment>.json) keeps every
recorded seed's curves with where it came from (the command, release, lockfile sha256,
devices), the resolved config they share (seeds aside), and the verdict's rule:

  checks   the quantities a run is judged on: the loss of each eval split at each eval step,
           and the train loss averaged over consecutive windows of `train_window` steps
           (a logged train loss is one batch's, 16 x 128 tokens in the tiny run: its
           step-to-step noise is as large as the seed-to-seed spread, a window's mean is not)
  alpha    the false-alarm rate the tolerance is chosen for: a healthy run is flagged with
           probability at most alpha (pax.curves.stats)

Per check the seeds give n, mean and sample std; those are stored and recomputed from the
stored runs on load (a mismatch means a hand edit, refused). `calibration` keeps the runs
that test the rule and were not used to build it: held-out seeds (each must pass) and
deliberately broken runs (each must fail); tests/curves/test_shipped.py re-judges them.
Re-record with `./noxw -s references`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from pax.curves import stats
from pax.curves.job_dir import CurvesError

SCHEMA = 2
METRICS = ("loss", "log_pplx")  # what a reference keeps of each run (and plot draws)
CHECK_METRIC = "loss"  # what the verdict judges; log_pplx equals it for an LM without aux losses
ALPHA = 0.01
TRAIN_WINDOW = 50
REFERENCES_DIR = Path(__file__).resolve().parent / "references"


@dataclasses.dataclass(frozen=True)
class Check:
    """One judged quantity: `metric` of `split` averaged over the logged `steps` (one step for
    an eval point, a window's steps for train)."""

    split: str
    metric: str
    steps: tuple[int, ...]

    @property
    def last(self) -> int:
        return self.steps[-1]

    @property
    def is_window(self) -> bool:
        return len(self.steps) > 1

    @property
    def label(self) -> str:
        split = split_label(self.split)
        if self.is_window:
            return f"{split} {self.metric} mean {self.steps[0]}..{self.steps[-1]}"
        return f"{split} {self.metric} @ {self.steps[0]}"

    def value(self, curves: dict) -> float | None:
        """The run's value for this check; None when it lacks one of the steps."""
        series = curves.get(self.split, {}).get(self.metric, {})
        if any(s not in series for s in self.steps):
            return None
        return math.fsum(series[s] for s in self.steps) / len(self.steps)


def split_label(split: str) -> str:
    return split.replace("eval_test_", "eval ") if split != "train" else "train"


def make_checks(curves: list[dict], window: int = TRAIN_WINDOW, metric: str = CHECK_METRIC):
    """The checks every recorded run can answer: eval points at the eval steps all runs
    logged, and train windows (k*window, (k+1)*window] holding every step all runs logged
    there (a window with none is dropped)."""
    if window < 1:
        raise CurvesError(f"train window must be at least 1 step, not {window}")
    splits = set(curves[0]).intersection(*curves[1:])
    checks = []
    for split in sorted(splits, key=lambda s: (s != "train", s)):
        series = [c[split].get(metric) for c in curves]
        if any(s is None for s in series):
            continue
        steps = sorted(set(series[0]).intersection(*series[1:]))
        steps = [s for s in steps if s > 0]  # step 0, if logged, is the untrained model
        if split == "train":
            windows: dict[int, list[int]] = {}
            for s in steps:
                windows.setdefault((s - 1) // window, []).append(s)
            checks += [Check(split, metric, tuple(w)) for _, w in sorted(windows.items())]
        else:
            checks += [Check(split, metric, (s,)) for s in steps]
    return checks


@dataclasses.dataclass(frozen=True)
class Stat:
    check: Check
    n: int
    mean: float
    std: float

    def to_json(self) -> dict:
        return {
            "split": self.check.split,
            "metric": self.check.metric,
            "steps": list(self.check.steps),
            "n": self.n,
            "mean": self.mean,
            "std": self.std,
        }


def make_stats(curves: list[dict], window: int = TRAIN_WINDOW) -> list[Stat]:
    if len(curves) < 2:
        raise CurvesError("a reference needs at least two recorded runs")
    out = []
    for check in make_checks(curves, window):
        values = [check.value(c) for c in curves]
        if not all(v is not None and math.isfinite(v) for v in values):
            raise CurvesError(f"{check.label} is not finite in a reference run: {values}")
        mean, std = stats.mean_std(values)
        out.append(Stat(check, len(values), mean, std))
    if not out:
        raise CurvesError("the runs share no split and step to make a band from")
    return out


# The resolved config (config.json) a band is for. The seed is what the recorded runs vary
# (SEED, and the training data's seed that follows it; EVAL_SEED stays: it fixes the eval text);
# checkpointing and NaN handling do not change a healthy run's curve; data paths differ per
# machine. NUM_TRAIN_STEPS may be shorter than the band's: such a run is judged on the checks
# it reaches (a short run for bisect), which is valid because the learning-rate schedule is
# set by its own hyper-parameters, not by the run's length.
CONFIG_IGNORED = (
    "task.train.seed",
    "task.data.training_seed",
    "task.train.checkpoint_every_n_steps",
    "task.train.checkpoint_max_to_keep",
    "task.train.async_checkpointing",
    "task.train.nan_policy",
    "task.train.pmap_use_tensorstore",
    "datasets.*.seed",
    "datasets.*.data_dir",
    "datasets.*.tokenizer_path",
    "datasets.*.bad_record_policy",
)
RUN_LENGTH = "task.train.num_train_steps"


def flat_config(config: dict) -> dict[str, object]:
    """config.json as {dotted key: value}, datasets keyed by name, minus CONFIG_IGNORED."""
    flat: dict[str, object] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            flat[prefix] = value

    for key, value in config.items():
        if key == "datasets" and isinstance(value, list):
            for i, ds in enumerate(value):
                name = ds.get("name", str(i)) if isinstance(ds, dict) else str(i)
                walk(f"datasets.{name}", ds)
        elif key != "experiment":
            walk(key, value)
    ignored = {k for k in flat if _ignored(k)}
    return {k: v for k, v in sorted(flat.items()) if k not in ignored}


def _ignored(key: str) -> bool:
    parts = key.split(".")
    for pattern in CONFIG_IGNORED:
        pat = pattern.split(".")
        if len(pat) == len(parts) and all(p in ("*", k) for p, k in zip(pat, parts)):
            return True
    return False


def config_differences(band: dict, run: dict) -> tuple[list[str], list[str]]:
    """(differences that make another config, keys only one side has) between flat configs.

    A shorter run length is not a difference (see RUN_LENGTH); a longer one is.
    """
    different, one_sided = [], []
    for key in sorted(set(band) | set(run)):
        if key not in band or key not in run:
            side = "the run" if key in run else "the band"
            one_sided.append(f"{key} (only {side} has it)")
            continue
        a, b = band[key], run[key]
        if a == b:
            continue
        if key == RUN_LENGTH and isinstance(a, int) and isinstance(b, int) and b < a:
            continue
        different.append(f"{key} {b!r} (band {a!r})")
    return different, one_sided


def _curves_to_json(curves: dict) -> dict:
    return {
        split: {
            metric: {str(step): value for step, value in sorted(series.items())}
            for metric, series in by_metric.items()
            if metric in METRICS
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


def _run_to_json(run: dict) -> dict:
    return {
        **{k: v for k, v in run.items() if k != "curves"},
        "curves": _curves_to_json(run["curves"]),
    }


def _runs_from_json(runs, where: str, what: str) -> list[dict]:
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise CurvesError(f"{where}: {what!r} must be a list of recorded runs")
    return [
        {**r, "curves": _curves_from_json(r.get("curves"), f"{where}: {what}[{i}]")}
        for i, r in enumerate(runs)
    ]


@dataclasses.dataclass
class Reference:
    """Recorded runs of one experiment and config, and the checks they calibrate."""

    name: str
    experiment: str
    runs: list[dict]  # metadata + "curves" per recorded seed
    config: dict = dataclasses.field(default_factory=dict)  # flat_config of the runs
    alpha: float = ALPHA
    train_window: int = TRAIN_WINDOW
    calibration: dict = dataclasses.field(default_factory=dict)  # held_out, broken: [runs]
    recorded_by: str = ""  # the command that recorded the whole file
    recorded_at: str = ""
    source: str = ""  # where it was loaded from
    stats: list[Stat] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if not 0.0 < self.alpha < 1.0:
            raise CurvesError(f"false-alarm rate alpha must be in (0, 1), not {self.alpha}")
        if not self.stats:
            self.stats = make_stats([r["curves"] for r in self.runs], self.train_window)

    @property
    def n(self) -> int:
        return len(self.runs)

    def seeds(self) -> list:
        return [r.get("seed") for r in self.runs]

    def summary(self) -> str:
        """`NAME (N seeds; 1 held_out, 2 broken)`, as the references session reports it."""
        kept = ", ".join(f"{len(v)} {k}" for k, v in self.calibration.items()) or "no calibration"
        return f"{self.name} ({self.n} seeds; {kept})"

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "name": self.name,
            "experiment": self.experiment,
            "recorded_by": self.recorded_by,
            "recorded_at": self.recorded_at,
            "verdict": {
                "alpha": self.alpha,
                "train_window": self.train_window,
                "note": "flag a run when any check is beyond stats.tolerance(alpha, checks, n) "
                "sample stds from the seeds' mean (see pax/curves/compare.py)",
            },
            "checks": [s.to_json() for s in self.stats],
            "config": self.config,
            "runs": [_run_to_json(r) for r in self.runs],
            "calibration": {
                kind: [_run_to_json(r) for r in runs] for kind, runs in self.calibration.items()
            },
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
                f"{where}: reference schema {data.get('schema')!r}, this Pax reads {SCHEMA}; "
                f"re-record it with ./noxw -s references"
            )
        for key in ("name", "experiment"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise CurvesError(f"{where}: {key!r} missing")
        runs = _runs_from_json(data.get("runs"), where, "runs")
        if len(runs) < 2:
            raise CurvesError(f"{where}: a reference needs at least two recorded runs")
        verdict = data.get("verdict") or {}
        try:
            alpha = float(verdict.get("alpha", ALPHA))
            window = int(verdict.get("train_window", TRAIN_WINDOW))
        except (TypeError, ValueError):
            raise CurvesError(f"{where}: verdict.alpha and train_window must be numbers") from None
        calibration = data.get("calibration") or {}
        if not isinstance(calibration, dict):
            raise CurvesError(f"{where}: 'calibration' must be an object")
        config = data.get("config") or {}
        if not isinstance(config, dict):
            raise CurvesError(f"{where}: 'config' must be an object")
        ref = cls(
            name=data["name"],
            experiment=data["experiment"],
            runs=runs,
            config=config,
            alpha=alpha,
            train_window=window,
            calibration={
                kind: _runs_from_json(r, where, f"calibration.{kind}")
                for kind, r in calibration.items()
            },
            recorded_by=data.get("recorded_by", ""),
            recorded_at=data.get("recorded_at", ""),
            source=where,
        )
        stored = data.get("checks")
        if stored is not None and _rounded(stored) != _rounded([s.to_json() for s in ref.stats]):
            raise CurvesError(
                f"{where}: the stored checks do not match the stored runs "
                f"(edited by hand?); re-record with ./noxw -s references"
            )
        return ref


def _rounded(x) -> str:
    # JSON round-trips floats exactly; 9 significant digits still forgives a reformatting.
    def walk(v):
        if isinstance(v, float):
            return float(f"{v:.9g}")
        if isinstance(v, list):
            return [walk(i) for i in v]
        if isinstance(v, dict):
            return {k: walk(i) for k, i in v.items()}
        return v

    return json.dumps(walk(x), sort_keys=True)


def reference_names() -> list[str]:
    """The references shipped with the package: `<Experiment>` (recorded on CPU) and
    `<Experiment>.<platform>` (the same experiment's band recorded on a TPU or GPU)."""
    return sorted(p.stem for p in REFERENCES_DIR.glob("*.json"))


def shipped_name(experiment: str, platform: str = "cpu") -> str:
    """The shipped reference's name for an experiment's band on a platform."""
    short = experiment.rsplit(".", 1)[-1]
    return short if platform == "cpu" else f"{short}.{platform}"


def load_reference(name: str | Path) -> Reference:
    """A shipped reference by experiment name (`LmCloudSpmdTiny`, or the dotted name), or a
    reference JSON file by path."""
    text = str(name)
    path = Path(text)
    if text.endswith(".json") or "/" in text or path.is_file():
        where = text
    else:
        names = reference_names()
        # A dotted experiment name stands for its short one; a platform's band is named
        # `<Experiment>.<platform>` already.
        short = text if text in names else text.rsplit(".", 1)[-1]
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


def reference_for(experiment: str | None, platform: str = "cpu") -> str | None:
    """The shipped reference for a run's experiment: the band recorded on the run's platform
    where one is shipped, else the CPU one, else None."""
    if not experiment:
        return None
    names = reference_names()
    for name in (shipped_name(experiment, platform), shipped_name(experiment)):
        if name in names:
            return name
    return None
