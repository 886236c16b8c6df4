"""Command-line overrides of hyper-parameters (`--set NUM_LAYERS=2`), checked by declaration.

A value is parsed as a Python literal (a bare word is a string; true/false are bools) and must
be what pax.experiments.config declares for the attribute: ints stay ints, floats take ints,
tuples take lists, Optional attributes take None, and a string must be one of its allowed
values. The check is the one pax.experiments.base.resolve applies to class attributes.
"""

import ast
import shlex
from typing import Optional

from pax.errors import UsageError
from pax.experiments import base
from pax.experiments.config import PARAMS


def _parse(text: str):
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() == "none":
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: a string


def apply(experiment_cls: type, assignments: list[str]) -> type:
    """A subclass of experiment_cls with the assignments applied; the original is untouched."""
    updates = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(
                f"bad override {assignment!r}: write --set KEY=VALUE, e.g. --set NUM_LAYERS=2"
            )
        param = PARAMS.get(key)
        if param is None:
            raise UsageError(
                f"unknown hyper-parameter {key!r} for {experiment_cls.__name__}"
                f"{base.unknown_hint(key)}"
            )
        value = _parse(text.strip())
        if param.type in (str, Optional[str]) and not isinstance(value, (str, type(None))):
            value = text.strip()  # a path or name that happens to look like a number
        try:
            updates[key] = base.check(param, value)
        except ValueError as e:
            example = getattr(experiment_cls, key)
            raise UsageError(
                f"bad value for {key}: {value!r} {e} ({param.doc}); e.g. --set "
                + shlex.quote(f"{key}={example!r}")
            ) from None
    if not updates:
        return experiment_cls
    return type(
        experiment_cls.__name__,
        (experiment_cls,),
        {
            **updates,
            base.OVERRIDES_ATTR: tuple(updates),
            "__module__": experiment_cls.__module__,
            "__qualname__": experiment_cls.__qualname__,
        },
    )
