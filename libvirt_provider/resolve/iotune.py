"""A VolumeAttributesClass's parameters as a disk's I/O limits (libvirt's `<iotune>`).

Kubernetes leaves a class's `parameters` (a map of strings) to its driver; this module is where
this provider says what they mean (docs/catalog.md lists every key with its unit). It is strict:
an unknown key, a value that is not a whole number, a combination libvirt would refuse, each is a
readable problem naming the class and the key, so a disk never gets half of what a class asks.
"""

from __future__ import annotations

import re
from typing import Final

from pydantic import ValidationError

from catalog.quantity import QuantityError, parse_quantity
from catalog.volume_attributes import VolumeAttributesClass
from libvirt_provider.resolved import IOTUNE_MAX, IoTune

__all__ = ["PARAMETERS", "parse_iotune"]

_RATES: Final = {
    "BytesPerSecond": "bytes_sec",
    "IOPS": "iops_sec",
}
_DIRECTIONS: Final = ("total", "read", "write")

PARAMETERS: Final[dict[str, str]] = {
    f"{direction}{key}{suffix}": f"{direction}_{family}{field}"
    for key, family in _RATES.items()
    for direction in _DIRECTIONS
    for suffix, field in (("", ""), ("Max", "_max"), ("MaxLength", "_max_length"))
}
"""Every numeric parameter a class may set -> the libvirt `<iotune>` element it becomes."""
GROUP_NAME: Final = "groupName"
_INTEGER = re.compile(r"^[0-9]{1,16}$")
_GROUP = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$")


def _value(key: str, text: str) -> tuple[int | None, str | None]:
    """The parameter's whole number, or why it is not one. Byte rates take a quantity (`10Mi`),
    everything else a plain integer."""
    if key.endswith(("BytesPerSecond", "BytesPerSecondMax")):
        try:
            value = parse_quantity(text)
        except QuantityError as err:
            return None, f"{err} (bytes per second, such as 10485760 or 10Mi)"
    elif _INTEGER.match(text.strip()):
        value = int(text.strip())
    else:
        unit = "seconds" if key.endswith("MaxLength") else "operations per second"
        return None, f"{text[:64]!r} is not a whole number of {unit}"
    if value > IOTUNE_MAX:
        return None, f"{value} is above the largest limit qemu accepts ({IOTUNE_MAX})"
    return value, None


def _key_of(field: str) -> str:
    return next(k for k, f in PARAMETERS.items() if f == field)


def parse_iotune(vac: VolumeAttributesClass) -> tuple[IoTune | None, list[str]]:
    """The limits `vac` asks for, or the problems (each "parameter <key>: why"); never both."""
    problems: list[str] = []
    fields: dict[str, int | str] = {}
    for key, text in sorted(vac.parameters.items()):
        if key == GROUP_NAME:
            if _GROUP.match(text):
                fields["group_name"] = text
            else:
                problems.append(
                    f"parameter {key}: {text[:64]!r} is not a group name (letters, digits, "
                    "'_', '.', '+', '-', at most 64)"
                )
            continue
        field = PARAMETERS.get(key)
        if field is None:
            known = ", ".join([*PARAMETERS, GROUP_NAME])
            problems.append(f"parameter {key}: unknown; the known parameters are {known}")
            continue
        value, problem = _value(key, text)
        if problem is not None:
            problems.append(f"parameter {key}: {problem}")
        elif value:
            fields[field] = value
    problems.extend(_combinations(fields))
    if problems:
        return None, problems
    try:
        return IoTune.model_validate(fields), []
    except ValidationError as err:  # pragma: no cover - _combinations says it first
        return None, [str(err)]


def _combinations(fields: dict[str, int | str]) -> list[str]:
    """What libvirt would refuse, said in the class's own keys."""
    problems: list[str] = []
    if "group_name" in fields and len(fields) == 1:
        # libvirt writes no <iotune> without a limit, so a lone group would never be seen applied.
        problems.append(f"parameter {GROUP_NAME}: needs at least one limit to share")
    for family in _RATES.values():
        for field_suffix in ("", "_max", "_max_length"):
            total = f"total_{family}{field_suffix}"
            others = [f"{d}_{family}{field_suffix}" for d in ("read", "write")]
            clash = [o for o in others if o in fields]
            if total in fields and clash:
                problems.append(
                    f"parameter {_key_of(total)}: cannot be combined with "
                    f"{' or '.join(_key_of(o) for o in clash)} (libvirt limits either the total "
                    "or reads and writes apart)"
                )
        for direction in _DIRECTIONS:
            base, burst = f"{direction}_{family}", f"{direction}_{family}_max"
            length = f"{burst}_length"
            if burst in fields and base not in fields:
                problems.append(f"parameter {_key_of(burst)}: needs {_key_of(base)}")
            elif burst in fields and int(fields[burst]) < int(fields[base]):
                problems.append(
                    f"parameter {_key_of(burst)}: {fields[burst]} is below "
                    f"{_key_of(base)} ({fields[base]}); a burst is at least the base rate"
                )
            if length in fields and burst not in fields:
                problems.append(f"parameter {_key_of(length)}: needs {_key_of(burst)}")
    return problems
