"""Kubernetes resource quantities (`512Mi`, `2Gi`, `1.5G`, `1e9`) as exact byte counts.

Parsed with `Decimal` so `1.5Gi` is exact, and refused when the result is not a whole number of
bytes or is negative: a VM cannot have 0.3 bytes of memory, and guessing a rounding direction would
silently change what the user asked for.

Hostile input costs nothing: the text is at most 64 characters and the result at most `MAX_BYTES`,
checked from the number's magnitude before any large value is built, so `1e999999` is refused at
once instead of holding the GIL for a minute while a million-digit integer is made.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "BYTES_PATTERN",
    "MAX_BYTES",
    "MAX_QUANTITY_LENGTH",
    "QUANTITY_SCHEMA",
    "QuantityError",
    "format_mebibytes",
    "parse_quantity",
]

MAX_BYTES = 2**63 - 1
"""The largest quantity accepted (8 EiB less a byte): Kubernetes' own quantities are int64."""
_MAX_DIGITS = len(str(MAX_BYTES))

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)"
    r"|[eE](?P<exponent>[+-]?\d+))?$"
)
BYTES_PATTERN = r"^(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE]\+?\d{1,2})?$"
"""The schema's form of a byte quantity: what the API server checks before the parser sees it
(no sign, no milli units, a two-digit exponent at most)."""
MAX_QUANTITY_LENGTH = 64
QUANTITY_SCHEMA: dict[str, Any] = {"pattern": BYTES_PATTERN, "maxLength": MAX_QUANTITY_LENGTH}
"""For a quantity field's `json_schema_extra`: the API server refuses malformed or oversized text
at once, while the Python side parses it for a readable message."""


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity, or not a whole, non-negative number of bytes."""


def parse_quantity(text: str) -> int:
    """The number of bytes `text` stands for; raises `QuantityError` with a readable message."""
    match = _QUANTITY.match(text.strip()) if len(text) <= MAX_QUANTITY_LENGTH else None
    if match is None:
        raise QuantityError(f"{text[:64]!r} is not a Kubernetes quantity (such as 512Mi or 2Gi)")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as error:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{text!r} is not a number") from error
    suffix = match["suffix"] or ""
    if match["exponent"] is not None:
        exponent = int(match["exponent"])  # at most 62 digits: cheap
        if number and number.adjusted() + exponent >= _MAX_DIGITS:
            raise QuantityError(f"{text!r} is larger than {MAX_BYTES} bytes")
        if number and number.adjusted() + exponent < -_MAX_DIGITS:
            raise QuantityError(f"{text!r} is not a whole number of bytes")
        value = number.scaleb(exponent) if number else Decimal(0)
    else:
        value = number * (_BINARY.get(suffix) or _DECIMAL[suffix])
    if value > MAX_BYTES:
        raise QuantityError(f"{text!r} is larger than {MAX_BYTES} bytes")
    if value < 0:
        raise QuantityError(f"{text!r} is negative")
    if value != value.to_integral_value():
        raise QuantityError(f"{text!r} is not a whole number of bytes")
    return int(value)


def format_mebibytes(size_bytes: int) -> str:
    """`size_bytes` in the shortest exact binary spelling (`2Gi`, `1536Mi`, `100Ki`)."""
    for suffix, factor in sorted(_BINARY.items(), key=lambda item: -item[1]):
        if size_bytes and size_bytes % factor == 0:
            return f"{size_bytes // factor}{suffix}"
    return str(size_bytes)
