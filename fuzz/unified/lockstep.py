"""The unified-cache judge: the radix judge (`fuzz/radix/lockstep.py`: the same ops, calls,
invariants and model comparison) over SGLang's `UnifiedRadixCache` with one tree core, with the
unified cache's contract (`oracle.unified`: its clock, `insert` freeing the duplicates itself,
`evict_for_alloc` for an allocation, the pin probe's delta and protected size), and what only the
unified cache shows: the KV-canary walk and the tree's own counts (`state.py`) and, for the Rust
core, the Python core run beside it (`twin.py`). Which core SGLang built is read once, counted,
and named in every report; an entry that asked for the Rust core and got the Python one (SGLang
falls back silently) diverges at its first op, saying why."""

from __future__ import annotations

from kvfuzz.fuzz.engine.remote import make
from kvfuzz.fuzz.engine.transcript import recording
from kvfuzz.fuzz.radix.lockstep import RadixLockstep, rows_needed
from kvfuzz.fuzz.unified import state
from kvfuzz.fuzz.unified.twin import twin_problems
from kvfuzz.impl.unified.twin_parts import STATE
from kvfuzz.oracle.unified.model import UnifiedModel

RUST, PYTHON = "ran on the Rust core", "ran on the Python core"
# What only a cache with the SWA component reaches (`swa_lockstep.py`).
TOMBSTONE, WINDOW_CUT, CURSOR = ("swa tombstone in the tree", "swa match cut by the window",
                                 "swa cursor moved at a checkpoint")
SWA_EVENTS = (TOMBSTONE, WINDOW_CUT, CURSOR)
# What only a cache with the Mamba component reaches (`mamba_lockstep.py`).
STATE_EVICTED, MAMBA_EXIST, MAMBA_CUT, BRANCHING, FULL_DONOR = (
    "mamba state evicted for an insert", "mamba insert where a state was",
    "mamba match cut short of the full hit", "mamba branching point",
    "mamba state funded by the Full donor")
MAMBA_EVENTS = (STATE_EVICTED, MAMBA_EXIST, MAMBA_CUT, BRANCHING)


class UnifiedLockstep(RadixLockstep):
    EVENTS = RadixLockstep.TREE_EVENTS + (RUST, PYTHON) + SWA_EVENTS + MAMBA_EVENTS + \
        (FULL_DONOR,)  # (the Mamba profile on the unified memory pool only)

    ALLOC_EVICT = "evict_for_alloc"
    CALLER_FREES_DUPLICATES = False
    VALUE_COVERS_PARTIAL_PAGE = False
    MODEL = UnifiedModel

    def build_impl(self, trace, cls, device, poison_keys: bool = True, core: str | None = None,
                   poison_mamba: bool = True, contract=None, donor: bool = False):
        """(`contract`: the model's; the driver reads the release's calls from the class.
        `donor`: the Mamba pools on the unified memory pool, `impl/unified/mamba.py`.)"""
        from kvfuzz.impl.unified.driver import UnifiedDriver  # imports torch and SGLang
        from kvfuzz.impl.unified.twin import TwinDriver

        rows, context = rows_needed(trace)
        args = (trace.page_size, trace.size, trace.policy, trace.events, rows, context, device,
                poison_keys)
        mamba = (getattr(trace, "mamba_slots", 0), poison_mamba, donor)
        if core == "rust":  # the Python core runs beside it
            return make(TwinDriver, cls, *args, trace.window, *mamba)
        return make(UnifiedDriver, cls, *args, core, trace.window, *mamba)

    def initial_problems(self):
        self.core = self.read("core")
        self.count(RUST if self.core["rust"] else PYTHON)
        problems = core_problems(self.core)
        return problems or super().initial_problems()

    def views(self, snap):
        ps = self.model.page_size
        self.inner = snap["inner"] is not None  # whether the core shows its nodes' fields
        # (the model's views kept for this whole read's walk check, `more_problems`: nothing
        # changes the model between the two)
        self._model_views = (self.reads, self.model.views())
        return state.views(snap, ps), state.exposed(self._model_views[1], snap)

    def as_read(self, expected):
        # (unread on the implementation's side, which judges nothing of it)
        inner = True if getattr(self, "inner", 0) else None
        # One op's light read asks for the same cut of the same model views up to three times
        # (the digest, the events, the nodes before the next op): built once. Keyed by the
        # list itself (held here, so its id is not reused) and the resolution; the model's
        # views are a new list after every op.
        held = self.__dict__.get("_as_read")
        if held is not None and held[0] is expected and held[1] == inner:
            return held[2]
        shown = state.exposed(expected, {"inner": inner})
        self._as_read = (expected, inner, shown)
        return shown

    def light_problems(self, light, expected):
        # the resolution the model's nodes stand for the core's at, until the next whole read
        # (`as_read`): the one this read's digest of the nodes was checked at
        self.inner = light["inner"]
        if self.core.get("twin") is not None:  # the Rust core's, for the cores' comparison
            self.twin_events.extend(light["events"])
        return state.light_problems(self.model, light, expected, self.as_read(expected)) + \
            twin_problems({**light, STATE: ("sizes", 0), "events": []})

    def whole_args(self) -> tuple:
        """The twin's whole state in every whole read of the Rust entry (a whole read is every
        few ops already). A trace of no ops (a shrinker's candidate) reads the state at its
        end before any op read the core: no twin asked for then."""
        core = getattr(self, "core", None) or {}
        return (True,) if core.get("twin") is not None else ()

    def more_problems(self, snap, nodes):
        held = self.__dict__.get("_model_views")
        expected = held[1] if held is not None and held[0] == self.reads else self.model.views()
        return state.walk_problems(snap, expected) + \
            twin_problems(snap, self.twin_events)

    @property
    def twin_events(self) -> list:
        """The Rust core's KV events since the twin's last whole state (`twin.py`)."""
        return self.__dict__.setdefault("_twin_events", [])

    def finish(self):
        """After the last op, the whole state where the last read was a light one, and the
        twin's whole state where the last read had only its sizes (the twin driver reads it
        whole every few reads: `impl/unified/twin_parts.py`)."""
        problems = super().finish()
        if problems:
            return problems
        last = self.__dict__.get("_held_reads", {}).get("snapshot_since", (0, None))[1]
        if not last or (last.get(STATE) or ("",))[0] != "sizes":
            return []
        snap = self.read_changed("snapshot_since", True)
        return [] if recording() else twin_problems(snap, self.twin_events)

    def context_lines(self):
        core = getattr(self, "core", None)  # unread when the constructor raised
        return [("tree core", describe_core(core))] if core else []


def core_problems(core: dict) -> list[tuple[str, str]]:
    """The Rust core was asked for and SGLang built another (its fallback is silent)."""
    if core["asked"] == "rust" and not core["rust"]:
        return [("tree core", f"the Rust core was asked for and SGLang built {core['built']} "
                              f"(fallback: {core['fallback']}): this run is not one of the "
                              f"Rust core")]
    twin = core.get("twin")
    if twin is not None and (twin.get("error") or twin["rust"]):
        return [("tree core", f"the Python core beside the Rust one was not built: "
                              f"{twin.get('error') or twin['built']}")]
    return []


def describe_core(core: dict) -> str:
    """Which core ran, for a report: "rust (...RustUnifiedTreeCore) ..."."""
    built = core["built"].rsplit(".", 1)[-1]
    text = f"{'rust' if core['rust'] else core['backend']} ({built})"
    if core["fallback"]:
        text += f", fell back from Rust: {core['fallback']}"
    twin = core.get("twin")
    if twin is not None and not twin.get("error"):
        other = twin["built"].rsplit(".", 1)[-1]
        text += f"; checked against the {twin['backend']} core ({other}) too"
    return text
