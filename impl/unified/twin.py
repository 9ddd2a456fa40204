"""Two `UnifiedRadixCache`s, one per tree core, driven by the same calls in the same order: the
Rust core's entry runs the Python core beside it, so that the two are compared through the
public API as well as each against the oracle (`fuzz/unified/twin.py` judges, from plain data).

Each call goes to the primary, then to the twin; the primary's answer (or exception) is what the
lock step gets, and both answers are kept (`pairs`) for the judge. The twin gets the same
arguments, except the slots the caller passes back: those the twin's own allocator handed out for
the same call (an insert's value, from `alloc_slots`), so that the twin never frees the primary's
slots. `snapshot()` carries the pairs since the last read, the twin's sizes, and every few reads
(and after the last op) the twin's whole public state."""

from __future__ import annotations

from kvfuzz.impl.changed_reads import ChangedReads
from kvfuzz.impl.registry import safe_text
from kvfuzz.impl.unified.driver import UnifiedDriver
from kvfuzz.impl.unified.reader import light, sizes, track
from kvfuzz.impl.unified.twin_parts import PAIRS, PREFIX, SIZES, STATE, WHOLE_EVERY

CALLS = ("admit_match", "admit_lock", "evict", "evict_for_alloc", "evict_for_demand", "extend",
         "checkpoint", "release", "release_stale", "match", "touch", "pin", "alloc_slots",
         "insert", "reset", "mamba_slot", "insert_mamba", "free_slots")


class TwinDriver(ChangedReads):
    """`UnifiedDriver(cls, *args)` with the Rust core, and with the Python core beside it."""

    PRIMARY, TWIN = "rust", "python"

    def __init__(self, cls, *args):
        """`args`: `UnifiedDriver`'s, up to `poison_keys`, then the SWA window (0: none), the
        Mamba slots (0: no Mamba component), whether to poison a Mamba value and whether the
        Mamba pools are the unified memory pool's (the Full donor)."""
        args, (window, mamba, poison, donor) = args[:8], (tuple(args[8:12]) + (
            0, 0, True, False)[len(args[8:12]):])
        self.primary = UnifiedDriver(cls, *args, core=self.PRIMARY, window=window,
                                     mamba_slots=mamba, poison_mamba=poison, donor=donor)
        self.pairs: list[tuple] = []
        self.reads = 0  # snapshots taken: the twin's whole state every WHOLE_EVERY
        self.slots: dict[tuple, list] = {}  # the primary's alloc_slots answer -> the twin's
        self.states: dict[int, int] = {}  # the primary's Mamba state slot -> the twin's
        # The twin's keys are left alone: the Python core keeps a caller's key (a declared
        # difference), and what the twin is for is the cores' answers, not that check.
        twin_args = args[:7] + (False,)
        try:
            self.twin, self.twin_error = UnifiedDriver(cls, *twin_args, core=self.TWIN,
                                                       window=window, mamba_slots=mamba,
                                                       poison_mamba=False, donor=donor), None
        except Exception as error:  # noqa: BLE001 - reported as a difference, not a crash
            self.twin, self.twin_error = None, safe_text(error)
            self.pairs.append(("constructor", ("answered", None), _raised(error)))

    def _both(self, method: str, *args):
        try:
            answer, raised = getattr(self.primary, method)(*args), None
        except Exception as error:  # noqa: BLE001 - the lock step judges it
            answer, raised = None, error
        if self.twin is not None:
            other = _outcome(getattr(self.twin, method), *self._twin_args(method, args))
            self.pairs.append((method, _raised(raised) if raised else ("answered", answer),
                               other))
            if method == "alloc_slots" and answer is not None and other[0] == "answered":
                self.slots[tuple(answer)] = other[1]
            if method == "mamba_slot" and raised is None and other[0] == "answered":
                self.states[answer[0]] = other[1][0]
        if raised is not None:
            raise raised
        return answer

    def _twin_args(self, method: str, args: tuple) -> tuple:
        if method == "free_slots":  # the twin's own slots of an abandoned insert
            return (self.slots.pop(tuple(args[0]), args[0]),)
        if method in ("insert", "insert_mamba") and args[3]:
            tokens, ns, priority, slots = args[:4]
            slots = self.slots.pop(tuple(slots), slots)
            if method == "insert":
                return tokens, ns, priority, slots
            return tokens, ns, priority, slots, self.states.pop(args[4], args[4])
        return args

    def mamba_grid(self) -> int:
        """The primary's (the twin's cache is built with the same server arguments)."""
        return self.primary.mamba_grid()

    def core(self) -> dict:
        twin = self.twin.core() if self.twin is not None else {"error": self.twin_error}
        return {**self.primary.core(), "twin": twin}

    def snapshot(self, whole: bool = False) -> dict:
        """The primary's state, the pairs since the last read (`twin pairs`), the twin's sizes
        (`twin sizes`), and every `WHOLE_EVERY`th read or when asked (`whole`, the read after
        the last op) the twin's public state, one part a key (`twin <part>`; `twin state` says
        which read this is). Flat, so that only what changed crosses (`ChangedReads`); the
        twin's whole state not after every op, since reading it (the Python core's walks, every
        node by path) was a third of a Rust trace's time, and a difference between the cores
        that lasts is still seen at the next whole read. `fuzz/unified/twin.py` puts it back
        together (`twin_of`)."""
        found = self.primary.snapshot()
        self.reads += 1
        found[PAIRS], found[STATE], found[SIZES] = self.pairs, None, None
        self.pairs = []
        if self.twin is None:
            return found
        try:
            found[SIZES] = sizes(self.twin)
            if not whole and self.reads % WHOLE_EVERY:
                track(self.twin)  # its nodes named by path as the primary's are, every op
                found[STATE] = ("sizes", self.reads)
                return found
            state = self.twin.snapshot(compared_only=True)
            found[STATE] = ("answered", self.reads)
            found.update((PREFIX + key, value) for key, value in state.items())
        except Exception as error:  # noqa: BLE001 - a difference, judged
            found[STATE] = _raised(error)
        return found

    def light_since(self, since: int):
        """The primary's light read (`reader.light`), the pairs since the last read and the
        twin's sizes (its nodes tracked by path), as what changed."""
        found = light(self.primary)
        found[PAIRS], found[SIZES], self.pairs = self.pairs, None, []
        if self.twin is not None:
            try:
                found[SIZES] = sizes(self.twin)
                track(self.twin)
            except Exception as error:  # noqa: BLE001 - a difference, judged
                found[SIZES] = ["raised", type(error).__name__, safe_text(error)]
        return self.changed("light", since, found)

    def snapshot_since(self, since: int, whole: bool = False):
        """`snapshot()` as what changed since read `since` (`ChangedReads`)."""
        return self.changed("snapshot", since, self.snapshot(whole))


def _outcome(call, *args) -> tuple:
    try:
        return "answered", call(*args)
    except Exception as error:  # noqa: BLE001 - compared with the primary's
        return _raised(error)


def _raised(error: BaseException) -> tuple:
    """("raised", its type, its message): the judge compares the types, since a message may
    name a node handle, which differs between the cores."""
    return "raised", type(error).__name__, safe_text(error)


for _name in CALLS:
    setattr(TwinDriver, _name, lambda self, *args, _name=_name: self._both(_name, *args))
