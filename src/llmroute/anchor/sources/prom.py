"""Thin, tolerant helpers over the Prometheus text format, as parsed by ``prometheus_client``.

Parsing is the library's (``prometheus_client.parser.text_string_to_metric_families``); these
helpers only select samples by name and labels and reduce them. Everything works on the
flat sample list, keyed by *sample* name (``vllm:prompt_tokens_total``,
``…_seconds_bucket``), so it does not depend on how the library names a family (it strips
``_total`` from counters that carry a ``# TYPE`` line and not from those that do not).

Selection before parsing: the library's parser is pure Python and costs ≈ 27 µs per line
(a real vLLM 0.20 scrape has 635 lines, ≈ 17 ms of CPU per poll — at five polls a second a
tenth of a core per engine), while a parser reads a dozen metrics of them. ``read_samples``
therefore hands the library only the lines of the metric families a parser names
(``wanted``: a sample line whose name starts with one of the names, a ``# HELP``/``# TYPE``
line about one); on that capture it parses 91 lines, ≈ 6.5× less CPU per poll.

Tolerance rules (a bad value means "signal missing for this poll", never an exception):

- ``read_samples`` returns None when the selected text cannot be parsed at all (the library
  raises ``ValueError`` on a malformed line, e.g. a scrape cut off mid-line); text cut off at
  a line boundary parses, and whatever it lost is simply absent. A malformed line of a
  metric nobody reads is dropped unread and spoils nothing.
- A gauge or counter reduction is None when no sample matches, or when any matching sample
  is NaN, ±Inf or negative (a partial sum would be misleading).
- A histogram is None when it has no ``+Inf`` bucket, fewer than two buckets, a bucket bound
  that is not a number, cumulative counts that decrease, or a ``_count`` that disagrees
  with the ``+Inf`` bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

Samples = tuple[Sample, ...]
Buckets = tuple[tuple[float, float], ...]
"""Cumulative histogram buckets: ``(upper_bound, cumulative_count)``, ascending, last +Inf."""


def read_samples(text: str, names: tuple[str, ...] = ()) -> Samples | None:
    """Every sample in Prometheus exposition ``text`` — only those of the families ``wanted``
    selects when ``names`` are given — or None if the selected text does not parse."""
    try:
        return tuple(s for family in text_string_to_metric_families(
            wanted(text, names) if names else text) for s in family.samples)
    except ValueError:  # the library's only error for malformed text (fuzzed in the tests)
        return None


def wanted(text: str, names: tuple[str, ...]) -> str:
    """The lines of ``text`` about metrics whose names start with one of ``names`` (family
    names such as ``vllm:prompt_tokens`` select ``…_total``, ``…_created``, a histogram's
    ``…_bucket``/``…_sum``/``…_count`` and the family's ``# HELP``/``# TYPE`` lines); every
    other line, comment and blank is dropped. ``"# HELP "`` and ``"# TYPE "`` are 7 characters,
    so the described name starts at offset 7."""
    keep = [line for line in text.splitlines()
            if line.startswith(names)
            or (line.startswith(("# HELP ", "# TYPE ")) and line.startswith(names, 7))]
    return "\n".join(keep) + "\n" if keep else ""


def select(samples: Samples, name: str, where: Mapping[str, str] | None = None) -> list[Sample]:
    """The samples called ``name`` whose labels include every ``where`` pair."""
    want = dict(where or {})
    return [s for s in samples
            if s.name == name and all(s.labels.get(k) == v for k, v in want.items())]


def valid(value: float) -> bool:
    """A usable gauge/counter value: finite and not negative."""
    return math.isfinite(value) and value >= 0


def gauge_sum(samples: Samples, name: str, *, where: Mapping[str, str] | None = None,
              collapse: tuple[str, ...] = ()) -> float | None:
    """Sum of ``name`` across its label sets (e.g. vLLM ``engine``/``model_name``).

    Label sets that differ only in a ``collapse`` label (e.g. SGLang ``tp_rank``, where each
    tensor-parallel rank may repeat the same scheduler state) count once, by their maximum.
    """
    values = _values(select(samples, name, where))
    if values is None:
        return None
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, v in values:
        key = tuple(sorted((k, x) for k, x in labels.items() if k not in collapse))
        groups[key] = max(groups.get(key, v), v)
    return math.fsum(groups.values())


def gauge_mean(samples: Samples, name: str, *,
               where: Mapping[str, str] | None = None) -> float | None:
    """Mean of ``name`` across its label sets (for fractions such as per-engine KV usage)."""
    values = _values(select(samples, name, where))
    if values is None:
        return None
    return math.fsum(v for _, v in values) / len(values)


def first_present(samples: Samples, names: Iterable[str],
                  reduce: Callable[[Samples, str], float | None] = gauge_sum) -> float | None:
    """``reduce`` of the first of ``names`` that has any sample (old and new metric names)."""
    for name in names:
        if select(samples, name):
            return reduce(samples, name)
    return None


def fraction(value: float | None) -> float | None:
    """``value`` if it is a fraction in [0, 1], else None."""
    return value if value is not None and 0.0 <= value <= 1.0 else None


def _values(matched: list[Sample]) -> list[tuple[dict[str, str], float]] | None:
    if not matched or not all(valid(s.value) for s in matched):
        return None
    return [(s.labels, float(s.value)) for s in matched]


def histogram(samples: Samples, base: str, *,
              where: Mapping[str, str] | None = None) -> Buckets | None:
    """The cumulative buckets of histogram ``base``, summed by ``le`` across label sets (as
    PromQL ``sum by (le) (base_bucket)``), or None if malformed (see the module docstring).

    The counts are cumulative since engine start: quantiles of these describe the engine's
    whole lifetime. Use ``diff_buckets`` on two polls for a recent window (as PromQL
    ``rate``).
    """
    by_le: dict[float, float] = {}
    for s in select(samples, base + "_bucket", where):
        le = _bound(s.labels.get("le"))
        if le is None or not valid(s.value):
            return None
        by_le[le] = by_le.get(le, 0.0) + float(s.value)
    buckets = tuple(sorted(by_le.items()))
    if not _well_formed(buckets):
        return None
    count = gauge_sum(samples, base + "_count", where=where)
    if count is not None and count != buckets[-1][1]:
        return None
    return buckets


def _bound(le: str | None) -> float | None:
    try:
        bound = float(le) if le is not None else math.nan
    except ValueError:
        return None
    return bound if bound == math.inf or math.isfinite(bound) else None


def _well_formed(buckets: Buckets) -> bool:
    counts = [c for _, c in buckets]
    return (len(buckets) >= 2 and buckets[-1][0] == math.inf
            and all(a <= b for a, b in zip(counts, counts[1:])))


def diff_buckets(newer: Buckets, older: Buckets) -> Buckets | None:
    """Observations between two polls (``newer`` − ``older``, bucket by bucket), or None if
    the bounds differ or any count went down (the engine restarted: a counter reset)."""
    if [b for b, _ in newer] != [b for b, _ in older]:
        return None
    diff = tuple((b, n - o) for (b, n), (_, o) in zip(newer, older))
    return diff if all(d >= 0 for _, d in diff) and _well_formed(diff) else None


def quantile(buckets: Buckets, q: float) -> float | None:
    """The ``q``-quantile (0 ≤ q ≤ 1) of a cumulative histogram, in the bucket bounds' unit.

    The method of Prometheus ``histogram_quantile`` (promql/quantile.go, ``bucketQuantile``):
    rank = q · total; take the first bucket whose cumulative count reaches the rank and
    interpolate linearly between its lower bound (the previous bucket's upper bound, or 0 for
    the first bucket) and its upper bound, assuming observations spread evenly inside it.
    A rank that falls in the ``+Inf`` bucket returns the highest finite bound, so the
    estimate is capped there. Differences from Prometheus: None instead of NaN for an empty
    histogram or q outside [0, 1]; for rank 0 the first *non-empty* bucket is used (its lower
    bound is returned), which keeps the estimate monotone in q.
    """
    total = buckets[-1][1] if buckets else 0.0
    if not 0.0 <= q <= 1.0 or total <= 0 or not _well_formed(buckets):
        return None
    rank = q * total
    i = next(i for i, (_, c) in enumerate(buckets) if c >= rank and c > 0)
    upper, count = buckets[i]
    if upper == math.inf:
        return buckets[i - 1][0] if i > 0 else None
    lower, below = (buckets[i - 1] if i > 0 else (min(0.0, upper), 0.0))
    return lower + (upper - lower) * (rank - below) / (count - below)


def quantile_ms(samples: Samples, bases: Iterable[str], q: float) -> float | None:
    """The ``q``-quantile in milliseconds of the first histogram in ``bases`` (seconds) that
    has any bucket; None if none does or it is malformed or empty."""
    for base in bases:
        if select(samples, base + "_bucket"):
            buckets = histogram(samples, base)
            seconds = quantile(buckets, q) if buckets is not None else None
            return None if seconds is None else seconds * 1000.0
    return None


def as_int(value: float | None) -> int | None:
    """A count as an int (rounded to nearest: engines print ``1.0`` and ``8.128902e+06``);
    None for None and for a non-finite value (``+Inf``/``NaN``, or a unit conversion that
    overflowed), which no count can be."""
    return None if value is None or not math.isfinite(value) else int(round(value))
