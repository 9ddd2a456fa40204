"""A driver's state read answered as what changed since the judge's last read of it.

A trace target reads the implementation's whole state after every op, and in a seeded run every
answer crosses from the implementation's process to the judge's as transcript data (checked,
pickled, checked again: `fuzz/engine/transcript.py`), most of it the same as after the op
before. A driver that answers a read through `changed` sends only the parts (and, for a list,
the items) that differ from its last answer; the judge (`Lockstep.read_changed`) keeps the last
whole state and puts the changes on it, so every op is still judged on the whole state.

Parts are compared by their `marshal` bytes: stricter than ==, so 6.0 replacing 6, True
replacing 1 or a tuple replacing a list is a change; a part marshal cannot write (an object that
is not plain data) is always sent, and the transcript refuses it as before.

The answer: (read number, whole, parts). `whole` when the judge holds nothing of this read or
holds an older read than this driver's last answer (a new judge over the same live driver);
else each changed part is ("=", value), or ("items", length, ((index, item), ...)) for a list
whose length or some items changed. `whole` None: `parts` is the whole state, each part as it
is (the answer to a judge in this process).

A judge in the driver's own process (`Lockstep.read_changed` over a driver that is no proxy: a
test's `Target.check`) asks with `since` None: nothing crosses a process there, so the answer is
the whole state, each part as it is, with nothing encoded or kept (the marshal walk of every
part after every op was a tenth of such a check's time; since 2026-12-05 not even wrapped as
("=", value) to be unwrapped again: two reads an op)."""

from __future__ import annotations

import marshal

_UNWRITABLE = object()


def _bytes(value):
    try:
        return marshal.dumps(value)
    except ValueError:  # not plain data: always sent (the transcript says what it is)
        return _UNWRITABLE


class ChangedReads:
    """Mixed into a driver: `changed(name, since, parts)` is the answer of read `name`."""

    def changed(self, name: str, since: int | None, parts: dict) -> tuple[int, bool, dict]:
        held = self.__dict__.setdefault("_changed_reads", {})
        if since is None:  # a judge in this process: the whole state as it is, nothing kept
            held.pop(name, None)  # (a numbered read after it is answered whole)
            return 0, None, parts
        number, last = held.get(name, (0, None))
        whole = last is None or since != number
        sent, kept = {}, {}
        for key, value in parts.items():
            blob = kept[key] = _bytes(value)
            before = None if whole else last.get(key)
            if before is not None and before is not _UNWRITABLE and before == blob:
                continue
            sent[key] = ("=", value) if before is None or before is _UNWRITABLE or \
                not isinstance(value, list) else _items(value, marshal.loads(before))
        held[name] = (number + 1, kept)
        return number + 1, whole, sent


_EXACT = frozenset((int, str, bytes, bool, type(None)))  # == is exact between two of one type


def _same(item, before) -> bool:
    kind = type(item)
    if kind is not type(before):
        return False
    if kind in _EXACT:
        return item == before
    blob = _bytes(item)
    return blob is not _UNWRITABLE and blob == _bytes(before)


def _items(value: list, before) -> tuple:
    """A list part as (length, the items that differ from the last answer's), or whole where
    that is no shorter."""
    if not isinstance(before, list):
        return "=", value
    changed = tuple((i, item) for i, item in enumerate(value)
                    if i >= len(before) or not _same(item, before[i]))
    if len(changed) * 2 > len(value):
        return "=", value
    return "items", len(value), changed
