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

from kvfuzz.impl.blockpool.driver import GROUP_BYTES, PoolReader, decode_key
from kvfuzz.impl.kvmanager.driver import _ids


class CallMismatch(Exception):
    """The lock step asked for a call the engine did not make (a bug of the guard's op
    mapping, never the implementation's): `LiveManagerDriver.mismatch` says which."""


class Pending:
    """The engine's call, waiting for the lock step: `method` (the lock step's driver method
    it stands for), `expected(args)` (why the lock step's arguments are not the engine's, or
    None) and `perform()` (the real call; its raw result is what the engine gets)."""

    def __init__(self, method: str, perform, expected=lambda args: None):
        self.method, self.perform, self.expected = method, perform, expected
        self.done, self.result = False, None


class LiveManagerDriver(PoolReader):
    def __init__(self, manager, blocks: int):
        super().__init__(manager.block_pool, blocks)
        self.manager = manager
        self.requests: dict[int, object] = {}      # rid -> the engine's Request
        self.lookups: dict[int, tuple] = {}         # rid -> its last get_computed_blocks, plain
        self.pending: Pending | None = None
        self.mismatch: str | None = None
        self._hashes: dict[bytes, int] = {}         # the engine's block hash -> the oracle's
        self._learned: dict[int, int] = {}          # rid -> how many of its hashes are paired
        self.model_hashes = lambda rid: []          # set by the guard: the oracle's chain of rid

    # -- the engine's calls, when the lock step reaches them -----------------------------------
    def _perform(self, method: str, args: tuple):
        pending = self.pending
        if pending is None or pending.done or pending.method != method:
            made = "none" if pending is None or pending.done else pending.method
            self.mismatch = f"the lock step called {method}{args} where the engine's call is {made}"
            raise CallMismatch(self.mismatch)
        reason = pending.expected(args)
        if reason:
            self.mismatch = reason
            raise CallMismatch(reason)
        pending.done = True
        pending.result = pending.perform()
        return pending.result

    def arrive(self, rid: int, tokens) -> None:
        pass  # the engine's Request is registered by the guard before the op

    def get_computed_blocks(self, rid: int):
        return self.lookups.pop(rid)  # the engine looked up before allocating

    def allocate_slots(self, rid: int, new: int, hit_tokens: int, admission: bool,
                       whole: bool = False, others_running: bool = False):
        return _ids(self._perform("allocate_slots", (rid, new, hit_tokens, admission, whole,
                                                     others_running)))

    def free(self, rid: int, finished: bool = True) -> None:
        self._perform("free", (rid, finished))

    def evict_blocks(self, ids) -> None:
        self._perform("evict_blocks", (sorted(ids),))

    def reset_prefix_cache(self) -> bool:
        return self._perform("reset_prefix_cache", ())

    def set_computed(self, rid: int, count: int, status: str) -> None:
        pass  # the scheduler sets its request's progress itself; the guard checks it next call

    def append_token(self, rid: int, token: int) -> None:
        pass  # the engine appended the sampled token before it asked for its slot

    def forget(self, rid: int) -> None:
        self.requests.pop(rid, None)

    # -- reads ---------------------------------------------------------------------------------
    def block_ids(self, rid: int) -> list[list[int]]:
        return [[int(b) for b in ids]
                for ids in self.manager.get_block_ids(self.requests[rid].request_id)]

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
