"""The second group's rules in the KV-cache-manager model (`model.py`) that the hybrid
coordinator brings (vllm 0.33.0, `single_type_kv_cache_manager.py`): a sliding window's hit on
the scheduler grid, a chunked-local hit, the sliding window's block mask, and full attention's
partial entry of a prompt's tail when a block holds several hash units. A mixin of
`KVManagerModel`: it reads the model's pool, sizes and settings, and marks the edge classes it
reaches (`self.marks`)."""

from __future__ import annotations

from kvfuzz.strategies.blockpool.events import Prompt


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class HybridRules:
    def _window_hit(self, hashes: list[int], limit_tokens: int) -> list[int]:
        """The rightmost run of cdiv(window - 1, size) cached blocks within `limit_tokens`
        whose right edge is on a scheduler block boundary (the nulls before it), else the run
        from block 0."""
        size = self.sizes[1]
        need, limit = cdiv(self.window - 1, size), limit_tokens // size
        out, run = [0] * limit, 0
        for index in range(limit - 1, -1, -1):
            found = self.pool.map.get((hashes[index], 1))
            if found:
                if run == 0 and (index + 1) * size % self.align:
                    self.marks.append("window hit: a block off the scheduler grid passed")
                    continue  # a run must end where a hit can
                out[index] = found[0]
                run += 1
                if run >= need:
                    return out[:index + run]
            else:
                run = 0
        return out[:run]

    def _local_hit(self, hashes: list[int], limit_tokens: int) -> list[int]:
        """Chunked-local attention: the blocks before the chunk of the token after
        `limit_tokens` null (outside every later token's chunk, as if computed), then the run
        of cached blocks from there up to `limit_tokens`."""
        size = self.sizes[1]
        start = limit_tokens // self.local * self.local // size
        out = [0] * start
        for index in range(start, limit_tokens // size):
            found = self.pool.map.get((hashes[index], 1))
            if not found:
                break
            out.append(found[0])
        if start:
            self.marks.append("chunked-local hit: blocks before the chunk null")
        return out

    def _reachable(self, start: int, end: int, prompt_tokens: int,
                   shared_boundary: int) -> set[int] | None:
        """The sliding-window blocks of [start, end) that are cached (None: all of them): a
        window's worth (cdiv(window - 1, block size) blocks) before each segment's end, the
        segment the retention interval, or without one (dense) the scheduler block size; with
        retention set, the same before each boundary a later hit can stop at (the prompt's
        last token, the shared-prefix junction), each cut to the scheduler block size; every
        block when a window spans a segment."""
        size = self.sizes[1]
        need = cdiv(self.window - 1, size)
        segment = self.align if self.retention is None else self.retention
        if segment:
            per_segment = segment // size
            if need >= per_segment:
                return None
            keep = {i for i in range(start, end) if i % per_segment >= per_segment - need}
        else:
            keep = set()
        if self.retention is None:
            return keep
        for boundary in [prompt_tokens - 1] + ([shared_boundary] if shared_boundary else []):
            stop = boundary // self.align * self.align // size
            keep |= set(range(max(start, stop - need), min(end, stop)))
        return keep

    def _cache_partial_tail(self, rid: int, hashes: list[int], tokens, prompt_tokens: int,
                            cacheable: int) -> None:
        """Full attention in blocks of more than one hash unit: the hash boundary before the
        prompt's last token, where it falls inside a block the step has cached, also names
        that block (a partial entry; every step that caches registers it, once)."""
        boundary = min((prompt_tokens - 1) // self.h, len(hashes)) * self.h
        if boundary == 0 or boundary > cacheable or boundary % self.bs == 0:
            return
        table = self.tables[0][rid]
        if boundary // self.bs < len(table):
            block, key = table[boundary // self.bs], (hashes[boundary // self.h - 1], 0)
            if self.pool.key[block] != key and block not in self.pool.map.get(key, ()):
                self.marks.append("partial entry registered")
            self.pool.cache_partial_block(Prompt(hashes, tokens), table[boundary // self.bs],
                                          boundary // self.h, 0, self.bs)
