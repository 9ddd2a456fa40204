"""What the block-pool judge counts (`EVENTS`: atheris features and the summary grid): the
pool's configurations a trace sets and, per op, what its calls reach (a refused or exact-fit
allocation, a free cached block touched, a shared block freed, partial entries, null blocks in a
call, ...), read from the model before the op changes it. Apart from the op handlers
(`lockstep.py`, `by_id.py`, which call these counters) so that the handlers read as the calls
they make."""

from __future__ import annotations

from collections import Counter

from kvfuzz.strategies.blockpool.trace import Unpin

# The pool's configurations a trace may set (`Trace`'s settings), each counted once per trace.
CONFIGS = {"caching off": lambda t: not t.caching,
           "blocks of several hash units": lambda t: t.scale > 1,
           "KV events": lambda t: t.events, "lookahead hashing": lambda t: t.lookahead > 0,
           "cache salt": lambda t: t.salt, "hits reported": lambda t: t.report,
           "images": lambda t: bool(t.images), "residency metrics": lambda t: t.metrics,
           "a pool of the null block alone": lambda t: t.blocks == 1}


class PoolCounts:
    """Mixed into `BlockPoolLockstep`: its counters, over its `model`, `trace` and `count`."""

    EVENTS = ("alloc refused", "alloc exact fit", "alloc ok", "alloc evicts cached",
              "lookup hit", "lookup miss", "share", "touch a free cached block", "cache",
              "cache nothing new", "cache a hash cached elsewhere", "free",
              "free: cached to the tail", "free in order", "free in order: cached to the tail",
              "free a shared block", "unpin", "unpin: cached to the tail",
              "null blocks in a table", "null blocks in a call", "evict cached",
              "evict uncached", "probe", "reset", "reset refused", "touch by id",
              "free by id", "free by id: cached to the tail", "unpin by id", "cache by id",
              "pin", "the same block twice in one call", "double free refused",
              "lookup partial hit", "cache a partial block", "partial block promoted to full",
              "partial entry supersedes a shorter one", "partial entry already there",
              "partial entry replaces", "partial entry extra",
              "move entries to a copy", "hit reported", "events published",
              "event: block removed", "cache with a block mask",
              *(f"config: {name}" for name in CONFIGS))

    def _count_alloc(self, n: int) -> None:
        model = self.model
        free = model.num_free()
        self.count("alloc refused" if n > free else "alloc exact fit" if n == free and n
                   else "alloc ok")
        if n <= free and any(model.key[b] for b in model.free[:n]):
            self.count("alloc evicts cached")

    def _count_touch(self, blocks) -> None:
        if any(b and self.model.ref[b] == 0 for b in blocks):
            self.count("touch a free cached block")
        if any(b == 0 for b in blocks):
            self.count("null blocks in a call")

    def _count_cache(self, op, holder, num_full: int) -> None:
        model, scale = self.model, self.trace.scale
        new = [(h, op.group) for h in op.hashes[scale - 1::scale][holder.cached:num_full]]
        self.count("cache" if new else "cache nothing new")
        if any(key in model.map for key in new):
            self.count("cache a hash cached elsewhere")
        blocks = holder.blocks[holder.cached:num_full]
        if 0 in blocks:
            self.count("null blocks in a call")
        if any(b and model.key[b] is not None for b in blocks):
            self.count("partial block promoted to full")

    def _count_partial(self, op, block: int, key, tokens: int) -> None:
        model = self.model
        self.count("cache a partial block")
        held = model.key[block] == key or block in model.map.get(key, ())
        if op.replace:
            self.count("partial entry replaces")
        elif held:
            self.count("partial entry already there")
        elif model.key[block] is not None and model.tokens[block] < tokens:
            self.count("partial entry supersedes a shorter one")
        elif model.key[block] is not None:
            self.count("partial entry extra")

    def _count_free(self, op, blocks) -> None:
        model = self.model
        counts = Counter(blocks)
        released = [b for b in counts if b and model.ref[b] == counts[b]]
        name = "unpin" if isinstance(op, Unpin) else "free in order" if not op.reverse else "free"
        self.count(name)
        if any(model.key[b] for b in released):
            self.count(f"{name}: cached to the tail")
        if len(released) < len([b for b in counts if b]):
            self.count("free a shared block")
        if any(n > 1 for b, n in counts.items() if b):
            self.count("the same block twice in one call")
        if 0 in counts:
            self.count("null blocks in a call")
