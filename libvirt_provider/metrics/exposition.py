"""Prometheus' text format for the families whose series are made per scrape, written directly.

Why not `prometheus_client`'s exposition: with 1,000 machines a body holds a few thousand
per-machine samples, and `generate_latest` formats each one label at a time through its
general escaping (every character of every label value looked at in Python): about 100 ms of
interpreter time per body on the lab's machine, 90 % of the body, and while it runs the daemon's
reconcile threads wait for the interpreter's lock (bench/metrics_profile.py). Here the label
names of a family are sorted once, a value is escaped only when it holds one of the three
characters that need it (Kubernetes names and host names never do), and a line is one format:
the same text, byte for byte, for a tenth of the time (a unit test holds the two equal).

Pure: families and samples in, text out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from libvirt_provider.metrics.machine_stats import Family, Kind, Sample

__all__ = ["go_float", "render"]


def go_float(value: float) -> str:
    """A sample's value as Prometheus' own clients write it (Go's float formatting: `+Inf`,
    `NaN`, exponents from 1e+06 on for large positive numbers)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


PAUSE_EVERY = 100
"""Sample lines written between two calls of `render`'s `pause`."""


def render(
    families: Iterable[tuple[Family, Sequence[Sample]]],
    *,
    pause: Callable[[], None] | None = None,
) -> str:
    """The families in Prometheus' text format (0.0.4): for each, its HELP and TYPE lines (also
    when it has no samples), then one line per sample, labels in name order. A sample's labels
    are its family's, in the family's order. `pause`, when given, is called every
    `PAUSE_EVERY` sample lines (the daemon hands the interpreter to its other threads there)."""
    out: list[str] = []
    written = 0
    for family, samples in families:
        name = family.exposed
        help_text = family.help.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {_type(family.kind)}\n")
        if not family.labels:
            out.extend(f"{name} {go_float(s.value)}\n" for s in samples)
            continue
        order = sorted(range(len(family.labels)), key=lambda i: family.labels[i])
        keys = [f'{family.labels[i]}="' for i in order]
        for sample in samples:
            written += 1
            if pause is not None and written % PAUSE_EVERY == 0:
                pause()
            labels = '",'.join(
                k + _escape(sample.labels[i]) for k, i in zip(keys, order, strict=True)
            )
            out.append(f'{name}{{{labels}"}} {go_float(sample.value)}\n')
    return "".join(out)


def _type(kind: Kind) -> str:
    return "counter" if kind is Kind.COUNTER else "gauge"
