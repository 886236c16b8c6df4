"""Command-line overrides of hyper-parameters (`--set NUM_LAYERS=2`), type-checked.

A value is parsed as a Python literal and must match the type of the attribute it replaces:
ints stay ints, floats accept ints, tuples take lists or tuples of the same element type, and
attributes whose default is None accept any literal (or None).
"""

import ast
import difflib

from pax.errors import UsageError
from pax.experiments.base import hyper_parameters


def _parse(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: a string


def _coerce(key: str, current, value):
    def bad(expected: str):
        return UsageError(
            f"bad value for {key}: {value!r} is not {expected} "
            f"(current value {current!r}); e.g. --set {key}={current!r}"
        )

    if current is None or value is None:
        return value
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad("a bool (True or False)")
    if isinstance(current, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad("an int")
    if isinstance(current, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise bad("a float")
    if isinstance(current, str):
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise bad("a string")
    if isinstance(current, (tuple, list)):
        if not isinstance(value, (tuple, list)):
            raise bad("a list")
        elem_types = {type(v) for v in current}
        if elem_types and any(type(v) not in elem_types for v in value):
            raise bad(f"a list of {'/'.join(sorted(t.__name__ for t in elem_types))}")
        return type(current)(value)
    raise UsageError(f"{key} cannot be set from the command line (type {type(current).__name__})")


def apply(experiment_cls: type, assignments: list[str]) -> type:
    """A subclass of experiment_cls with the assignments applied; the original is untouched."""
    params = hyper_parameters(experiment_cls)
    updates = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(
                f"bad override {assignment!r}: write --set KEY=VALUE, e.g. --set NUM_LAYERS=2"
            )
        if key not in params:
            close = difflib.get_close_matches(key.upper(), list(params), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UsageError(f"unknown hyper-parameter {key!r} for {experiment_cls.__name__}{hint}")
        updates[key] = _coerce(key, params[key], _parse(text.strip()))
    if not updates:
        return experiment_cls
    return type(
        experiment_cls.__name__,
        (experiment_cls,),
        {
            **updates,
            "__module__": experiment_cls.__module__,
            "__qualname__": experiment_cls.__qualname__,
        },
    )
