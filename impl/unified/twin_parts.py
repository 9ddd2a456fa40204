"""The keys of the twin driver's parts in a snapshot (`twin.py` writes them, the judge's
`fuzz/unified/twin.py` reads them back): here, so that the judge need not import torch."""

PAIRS = "twin pairs"  # every call's answer on both cores since the last read
# (kind, read number): kind "answered" (the twin's whole state is in this read), "sizes" (only
# its sizes), "raised" (then its type and message instead of the number), or None: no twin
STATE = "twin state"
SIZES = "twin sizes"  # the twin's sizes, in every read: (evictable, protected, total, available)
PREFIX = "twin "  # before each part of the twin's public state
WHOLE_EVERY = 4  # the twin's whole state is read every this many reads, and after the last op
