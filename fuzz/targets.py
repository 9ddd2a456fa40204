"""The one table of targets. A new target is a folder per layer (copy one target's) and one line
here; the engine finds everything else through the target's parts (`kvfuzz.fuzz.engine.target`)."""

from __future__ import annotations

from kvfuzz.fuzz.allocator.target import ALLOCATOR
from kvfuzz.fuzz.blockpool.target import BLOCKPOOL
from kvfuzz.fuzz.compaction.target import COMPACTION
from kvfuzz.fuzz.kvmanager.target import KVMANAGER
from kvfuzz.fuzz.mamba.target import MAMBA
from kvfuzz.fuzz.offload.target import OFFLOAD
from kvfuzz.fuzz.paged.target import DECODE, EXTEND
from kvfuzz.fuzz.radix.target import RADIX
from kvfuzz.fuzz.swa.target import SWA
from kvfuzz.fuzz.unified.target import UNIFIED
from kvfuzz.fuzz.engine.target import Target
from kvfuzz.strategies.inputs import FieldReader

TARGETS: dict[str, Target] = {t.name: t for t in (EXTEND, DECODE, ALLOCATOR, COMPACTION,
                                                      MAMBA, SWA, BLOCKPOOL, KVMANAGER,
                                                      RADIX, OFFLOAD, UNIFIED)}


def for_document(data: object, source: str) -> Target:
    """The target a decoded JSON file belongs to, by its "format" field (and, where targets share
    a format, by what `Target.owns` reads); a `FormatError` naming the field otherwise."""
    reader = FieldReader(source)
    reader.expect(isinstance(data, dict), "(top level)", "expected a JSON object",
                  type(data).__name__)
    formats = list(dict.fromkeys(t.codec.format for t in TARGETS.values()))
    sharing = [t for t in TARGETS.values() if t.codec.format == data.get("format")]
    reader.choice(data.get("format"), "format", formats)
    owners = [t for t in sharing if t.codec.owns(data)]
    if len(owners) != 1:  # only where a format is shared: its targets differ in "target"
        reader.choice(data.get("target"), "target", [t.name for t in sharing])
    return owners[0]
