"""What the leader keeps of a VirtualMachine or a provider object: the fields it reads, no more.

Kubernetes limits an object's size (about 1.5 MB in etcd) but not the number of its labels or
annotations, and a tenant who may create VirtualMachines writes them. The leader watches every VM
and LibvirtMachine of the cluster; decoded in full, a VM with 40,000 labels takes about 9 MiB of
Python objects, and 14 of them exceeded the DaemonSet's memory limit. So what is decoded and kept
is cut down to what some reader uses (`Kept` names the labels and annotations), in two places:

- `lean_text`, before decoding: every `"labels"` and `"annotations"` map of strings in the JSON
  text is rewritten with only the kept keys, so the tenant's megabyte never becomes tens of
  thousands of Python strings (decoding them, even briefly, on several threads at once left the
  allocator holding the peak);
- `lean`, on a decoded object: the metadata fields that are kept (`KEPT_METADATA`), with the
  labels and annotations cut the same way.

A cut map leaves a digest of what it held beside it (`labelsDigest`, `annotationsDigest`, named by
`DIGEST_FIELDS`), so an edit of a label nobody reads still shows as an edit (`user_edit_mark`): a
user touches a machine to make its daemon look again now, and a reader that compared the kept
keys only would miss that.

Spec and status are kept as they come: their schema is the CRD's, and the API server prunes
fields it does not know. Pure: no I/O.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DIGEST_FIELDS", "KEPT_METADATA", "Kept", "lean", "lean_text", "user_edit_mark"]

Obj = dict[str, Any]

KEPT_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "finalizers",
        "ownerReferences",
        "labels",
        "annotations",
        "labelsDigest",
        "annotationsDigest",
    }
)
"""The metadata fields kept (labels and annotations only with the keys `Kept` names). Not kept:
`managedFields` (the API server's bookkeeping, often the biggest part of an object), `generateName`,
`selfLink` and anything a later API version adds."""

DIGEST_FIELDS: dict[str, str] = {"labels": "labelsDigest", "annotations": "annotationsDigest"}
"""The metadata field beside each cut map that holds a digest of the whole map as it came (absent
when the map was empty). Kubernetes' ObjectMeta has no such fields: they exist only in the
decoded copies, and nothing writes them back."""


_DIGEST_CHUNK = 64 * 1024


def _digest(text: str, start: int = 0, end: int | None = None) -> str:
    """A short digest of `text[start:end]`, read in chunks: a tenant's megabyte of labels is
    never copied whole."""
    end = len(text) if end is None else end
    h = hashlib.blake2b(digest_size=8)
    for at in range(start, end, _DIGEST_CHUNK):
        h.update(text[at : min(at + _DIGEST_CHUNK, end)].encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Kept:
    """The label and annotation keys some reader of the objects uses."""

    labels: frozenset[str] = frozenset()
    annotations: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *, labels: Iterable[str] = (), annotations: Iterable[str] = ()) -> Kept:
        return cls(frozenset(labels), frozenset(annotations))

    def __or__(self, other: Kept) -> Kept:
        return Kept(self.labels | other.labels, self.annotations | other.annotations)


# A JSON string, unrolled (`[^"\\]*` runs at C speed, escapes one at a time), possessive: a
# match keeps no backtracking state, however long.
_STRING = r'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
# The start of a labels or annotations map, as a key of an object (after `{` or `,`, so never
# text inside a string, where every quote is escaped).
_MAP_START = re.compile(r'[{,]\s*"(labels|annotations)"\s*:\s*(?=\{)')
# A whole map of strings, matched in one go.
_MAP = re.compile(rf"\{{\s*(?:{_STRING}\s*:\s*{_STRING}\s*,?\s*)*+\}}")
_EMPTY_MAP = re.compile(r"\{\s*\}")
# One pair of a map of strings, and what follows it: `,` (more pairs) or `}` (the end).
_PAIR = re.compile(rf"\s*({_STRING})\s*:\s*({_STRING})\s*([,}}])\s*")


@functools.cache
def _pair_of(key: str) -> re.Pattern[str]:
    """The pair of `key` in a map's text (a pair starts after `{` or `,`)."""
    return re.compile(rf'[{{,]\s*("{re.escape(key)}")\s*:\s*({_STRING})')


def _kept_pairs(text: str, start: int, end: int, keys: frozenset[str]) -> list[str]:
    """The pairs of the map `text[start:end]` whose keys are in `keys`, as JSON text."""
    if not keys:
        return []
    if text.find("\\", start, end) < 0:
        # No escapes anywhere in the map: each kept key is found as it is written.
        found = (_pair_of(key).search(text, start, end) for key in sorted(keys))
        return [f"{pair.group(1)}:{pair.group(2)}" for pair in found if pair is not None]
    pairs: list[str] = []
    pos = start + 1
    while (pair := _PAIR.match(text, pos, end)) is not None:
        key = pair.group(1)
        # Kept keys need no escapes; a key written with escapes is decoded to compare.
        if (key[1:-1] if "\\" not in key else json.loads(key)) in keys:
            pairs.append(f"{key}:{pair.group(2)}")
        pos = pair.end()
    return pairs


def lean_text(text: str, kept: Kept) -> str:
    """`text` (JSON) with every map of strings under a `"labels"` or `"annotations"` key cut to
    the keys `kept` names for it; the rest of the text as it was. A map that holds anything but
    strings is left alone (no Kubernetes labels or annotations look like that); a map that held
    anything gets its digest beside it (`DIGEST_FIELDS`). The dropped pairs never become Python
    objects: a map is matched whole, then searched for its kept keys
    (read pair by pair, one at a time, when it holds escapes)."""
    out: list[str] = []
    done = at = 0
    while (found := _MAP_START.search(text, at)) is not None:
        body = _MAP.match(text, found.end())
        if body is None:  # not a map of strings: left as it is
            at = found.end()
            continue
        field = found.group(1)
        keys = kept.labels if field == "labels" else kept.annotations
        pairs = _kept_pairs(text, body.start(), body.end(), keys)
        out.append(text[done : found.start(1) - 1])  # up to the key's opening quote
        out.append(f'"{field}":{{{",".join(pairs)}}}')
        if _EMPTY_MAP.fullmatch(text, body.start(), body.end()) is None:
            digest = _digest(text, body.start(), body.end())
            out.append(f',"{DIGEST_FIELDS[field]}":"{digest}"')
        done = at = body.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _only(found: object, keys: frozenset[str]) -> dict[str, Any] | None:
    if not isinstance(found, Mapping):
        return None
    return {k: v for k, v in found.items() if k in keys}


def lean(obj: Mapping[str, Any], kept: Kept) -> Obj:
    """`obj` with only the metadata fields in `KEPT_METADATA`, its labels and annotations cut to
    the keys `kept` names (a map left empty is dropped) and a digest of each map that held
    anything; everything else as it was. `obj` is not changed, and an object already lean keeps
    the digests it has."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return dict(obj)
    kept_meta: Obj = {k: v for k, v in meta.items() if k in KEPT_METADATA}
    for field, keys in (("labels", kept.labels), ("annotations", kept.annotations)):
        if field in kept_meta:
            found = kept_meta.pop(field)
            if found and DIGEST_FIELDS[field] not in kept_meta:
                text = json.dumps(found, sort_keys=True, separators=(",", ":"), default=str)
                kept_meta[DIGEST_FIELDS[field]] = _digest(text)
            cut = _only(found, keys)
            if cut:
                kept_meta[field] = cut
    return {**obj, "metadata": kept_meta}


def user_edit_mark(meta: Mapping[str, Any]) -> tuple[object, ...]:
    """What of an object's metadata a user's edit changes, for telling such edits from status
    writes, whether the object is lean or whole: the labels and annotations kept, and the
    digests of the maps as they came (a lean copy's only sign of a change to a label cut)."""
    return (
        tuple(sorted((meta.get("labels") or {}).items())),
        tuple(sorted((meta.get("annotations") or {}).items())),
        meta.get(DIGEST_FIELDS["labels"]),
        meta.get(DIGEST_FIELDS["annotations"]),
    )
