"""The kvmanager lock step's driver over a live `KVCacheManager`, one an engine is using
(`kvfuzz.guard`, `fuzz/kvmanager/guard.py`): where `driver.py` builds the manager and makes
the scheduler's calls itself, this one is handed each call the engine makes and performs it
when the lock step reaches it, exactly once, with the engine's own arguments. Reads (the block
tables, the pool) go to the live manager at the moment the lock step asks.

The engine hashes blocks with its own function (SHA-256 by default), the oracle with kvfuzz's:
a pool key is translated through the pairs of both hash chains of each request the guard has
seen (`learn`); a hash no request produced reads as itself, which no oracle hash equals.
"""

from __future__ import annotations

from kvfuzz.impl.blockpool.driver import GROUP_BYTES, decode_key
from kvfuzz.impl.kvmanager.driver import ManagerReads, _ids
from kvfuzz.impl.kvmanager.live_align import AlignStepReads
from kvfuzz.impl.live_calls import LiveCalls


class LiveManagerDriver(AlignStepReads, LiveCalls, ManagerReads):
    def __init__(self, manager, blocks: int):
        super().__init__(manager.block_pool, blocks)
        self.manager = manager
        self.requests: dict[int, object] = {}      # rid -> the engine's Request
        self.lookups: dict[int, tuple] = {}         # rid -> its last get_computed_blocks, plain
        self.hits: dict[int, object] = {}           # rid -> the engine's own lookup result
                                                    # (its KVCacheBlocks, for the reads)
        self._hashes: dict[bytes, int] = {}         # the engine's block hash -> the oracle's
        self._learned: dict[int, int] = {}          # rid -> how many of its hashes are paired
        self.model_hashes = lambda rid: []          # set by the guard: the oracle's chain of rid

    # -- the engine's calls, when the lock step reaches them (`LiveCalls._perform`) ---------
    def arrive(self, rid: int, tokens, no_cache_read: bool = False,
               report: bool = False, *extra_keys) -> None:
        pass  # the engine's Request (its extra keys with it) is registered by the guard first

    def get_computed_blocks(self, rid: int, cap: int | None = None):
        # (its hashes paired again from its first: a resumable request's may have been made
        # again before its lookup, under lookahead hashing: scheduler.py 1111; `cap`: the
        # engine's own, which the guard wrote into the op, the lookup made with it)
        self._learned.pop(rid, None)
        return self.lookups.pop(rid)[:3]  # the engine looked up before allocating

    def connector_lookup(self, rid: int, cap: int | None = None):
        """The engine's lookup for a connector: `get_computed_blocks_for_connector`'s four
        answers, or `get_computed_blocks`' three and a hit that never diverged (a connector
        that does not take divergent hybrid hits: the same lookup without a Mamba group);
        `cap`: the engine's `max_cache_hit_length`, as `get_computed_blocks`'."""
        self._learned.pop(rid, None)  # (as get_computed_blocks')
        if len(self.lookups[rid]) == 3 and self.manager.kv_cache_config.has_mamba_layers:
            return self.align_connector_lookup(rid, cap)  # (live_align.py)
        found = self.lookups.pop(rid)
        if len(found) == 4 and self.manager.kv_cache_config.has_mamba_layers:
            # beside a Mamba group the engine's connector lookup stands for the
            # `get_computed_blocks` the reduced mode asks after it where nothing is loaded: the
            # scheduler asks it only for a diverged hit (then the guard holds that answer)
            self.lookups[rid] = found[:3]
        return found if len(found) == 4 else (*found, False)

    def allocate_slots(self, rid: int, new: int, hit_tokens: int, admission: bool,
                       whole: bool = False, others_running: bool = False,
                       in_flight: int = 0):
        return _ids(self._perform("allocate_slots", (rid, new, hit_tokens, admission, whole,
                                                     others_running, in_flight)))

    def connect(self, rid: int, new: int, hit_tokens: int, external: int, load: bool,
                reserve: int, whole: bool, others_running: bool, written=None):
        more = () if written is None else (tuple(written),)
        return _ids(self._perform("connect", (rid, new, hit_tokens, external, load, reserve,
                                              whole, others_running, *more)))

    def resume(self, rid: int, new: int, others_running: bool, whole: bool = False,
               in_flight: int = 0):
        return _ids(self._perform("resume", (rid, new, others_running, whole, in_flight)))

    def cache_blocks(self, rid: int, computed: int) -> None:
        self._perform("cache_blocks", (rid, computed))

    def record_blocks_for_zeroing(self, rid: int, start: int) -> None:
        pass  # the engine's own next call after a failed load's cache_blocks (guard_zeroing.py)

    def pending_new_block_ids(self) -> list[int]:
        """The zeroing records not yet taken, group after group, read without emptying them
        (the engine's scheduler takes them: `take_new_block_ids`)."""
        return [int(block) for group in self.manager.coordinator.single_type_managers
                for block in getattr(group, "new_block_ids", ())]

    def free(self, rid: int, finished: bool = True) -> None:
        self._perform("free", (rid, finished))

    def pop_blocks_for_free(self, rid: int, finished: bool = True) -> list[int]:
        return [int(block.block_id)
                for block in self._perform("pop_blocks_for_free", (rid, finished))]

    def remove_skipped_blocks(self, rid: int, processed: int) -> None:
        self._perform("remove_skipped_blocks", (rid, processed))

    def release(self, rid: int) -> None:
        self._perform("release", (rid,))

    def evict_blocks(self, ids) -> None:
        self._perform("evict_blocks", (sorted(ids),))

    def reset_prefix_cache(self) -> bool:
        return self._perform("reset_prefix_cache", ())

    def set_computed(self, rid: int, count: int, status: str) -> None:
        pass  # the scheduler sets its request's progress itself; the guard checks it next call

    def append_token(self, rid: int, token: int) -> None:
        pass  # the engine appended the sampled token before it asked for its slot

    def stream(self, rid: int, tokens, discard: bool = False, images=()) -> None:
        """The engine's scheduler took the streaming update itself. A discarded token the
        trace had (`discard`) took the hash of the block it completed with it, on both sides:
        the request's hashes are paired again from its first (`learn` pairs new ones only)."""
        if discard:
            self._learned.pop(rid, None)

    def forget(self, rid: int) -> None:
        self.requests.pop(rid, None)

    def learn(self) -> None:
        """Pairs the engine's block hashes with the oracle's, request by request (both chains
        grow as tokens come; a finished request's pairs stay, its blocks stay cached)."""
        for rid, request in self.requests.items():
            engine = list(request.block_hashes)
            done = self._learned.get(rid, 0)
            if len(engine) > done:
                ours = self.model_hashes(rid)
                for index in range(done, min(len(engine), len(ours))):
                    self._hashes[bytes(engine[index])] = ours[index]
                self._learned[rid] = min(len(engine), len(ours))

    def decode_key(self, key) -> tuple[int, int]:
        raw = bytes(key)
        found = self._hashes.get(raw[:-GROUP_BYTES])
        return decode_key(key) if found is None else \
            (found, int.from_bytes(raw[-GROUP_BYTES:], "big"))

    def keys(self) -> list:
        self.learn()
        return super().keys()

    def cache_map(self) -> dict:
        self.learn()
        return super().cache_map()
