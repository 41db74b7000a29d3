"""Pearson's chi-square goodness-of-fit test, for the distribution tests of speculative sampling."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping

import torch

ALPHA = 0.001  # the tests' significance level: a correct rule passes with p > ALPHA


def chi_square_p(samples: Iterable[Hashable], expected: Mapping[Hashable, float], min_count: float = 5.0) -> float:
    """p-value of ``samples`` being drawn from ``expected`` (outcome -> probability, summing to 1).

    Outcomes whose expected count is under ``min_count`` are pooled into one bin (the chi-square
    approximation needs about 5 per bin); a sample outside ``expected`` lands in that bin too, so
    an impossible outcome counts against the fit.
    """
    counts = Counter(samples)
    n = sum(counts.values())
    big = {k for k, p in expected.items() if p * n >= min_count}
    observed = [counts.get(k, 0) for k in big]
    means = [expected[k] * n for k in big]
    rest_observed = n - sum(observed)
    rest_mean = n - sum(means)
    if rest_mean > 1e-9 * n:
        observed.append(rest_observed)
        means.append(rest_mean)
    elif rest_observed:
        return 0.0  # outcomes the target never emits
    stat = sum((o - m) ** 2 / m for o, m in zip(observed, means, strict=True))
    df = len(means) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))
