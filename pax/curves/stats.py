"""Student's t for the verdict's tolerance, in the standard library (no scipy in the tools venv).

A healthy run's value x at a check, against n recorded seeds with mean m and sample std s,
is one new draw from the same distribution, so under a normal model

    (x - m) / (s · sqrt(1 + 1/n))  ~  Student's t with n - 1 degrees of freedom

(the prediction interval for one new observation). With J checks and a false-alarm rate
alpha for the whole run, each check gets alpha / J (Bonferroni: the rate is at most alpha
whatever the checks' correlation) and the tolerance is the two-sided t quantile there.

The t distribution is evaluated exactly for integer degrees of freedom with the finite
series of Abramowitz & Stegun 26.7.3 / 26.7.4, A(t|nu) = P(|T| <= t) in theta =
atan(t / sqrt(nu)); the quantile is found by bisection on it.
"""

from __future__ import annotations

import math


def two_sided_prob(t: float, dof: int) -> float:
    """A(t|dof) = P(|T| <= t) for Student's t with an integer number of degrees of freedom."""
    if dof < 1 or int(dof) != dof:
        raise ValueError(f"degrees of freedom must be a positive integer, not {dof!r}")
    t = abs(t)
    if math.isinf(t):
        return 1.0
    theta = math.atan(t / math.sqrt(dof))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2 == 0:
        # sin(theta) * (1 + 1/2 c^2 + 1·3/(2·4) c^4 + ... up to c^(dof-2))
        term, total = 1.0, 1.0
        for k in range(1, dof // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return min(1.0, s * total)
    # odd: 2/pi * (theta + sin cos (1 + 2/3 c^2 + 2·4/(3·5) c^4 + ... up to c^(dof-3)))
    if dof == 1:
        return 2.0 * theta / math.pi
    term, total = 1.0, 1.0
    for k in range(1, (dof - 1) // 2):
        term *= c2 * (2 * k) / (2 * k + 1)
        total += term
    return min(1.0, 2.0 / math.pi * (theta + s * math.cos(theta) * total))


def two_sided_quantile(alpha: float, dof: int) -> float:
    """The t with P(|T| > t) = alpha: the two-sided critical value at level alpha."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), not {alpha!r}")
    target = 1.0 - alpha
    lo, hi = 0.0, 1.0
    while two_sided_prob(hi, dof) < target:
        hi *= 2.0
        if hi > 1e12:  # dof 1 and an absurdly small alpha: no useful tolerance
            return math.inf
    for _ in range(200):  # bisection to the last bit
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if two_sided_prob(mid, dof) < target:
            lo = mid
        else:
            hi = mid
    return hi


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1); std 0 for one value."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))


def tolerance(alpha: float, checks: int, n: int) -> float:
    """How many recorded stds (s) a healthy run may stray from the recorded mean at each of
    `checks` checks, so that a run is flagged with probability at most alpha in all: the
    Bonferroni-split two-sided t quantile times the prediction factor sqrt(1 + 1/n)."""
    if n < 2:
        raise ValueError("a tolerance needs at least two recorded runs")
    return two_sided_quantile(alpha / checks, n - 1) * math.sqrt(1.0 + 1.0 / n)
