"""The second group's rules in the KV-cache-manager model (`model.py`) that the hybrid
coordinator brings (vllm 0.33.0, `single_type_kv_cache_manager.py`): a sliding window's hit on
the scheduler grid, a chunked-local hit, the sliding window's block mask, and full attention's
partial entry of a prompt's tail when a block holds several hash units; with EAGLE, the
window's run a block longer and a block later, and the replay boundaries a hit drops back to.
A mixin of `KVManagerModel`: it reads the model's pool, sizes and settings, and marks the edge
classes it reaches (`self.marks`). The window's rules take the window's group (`group`, by
default `self.second`: 1 beside full attention, 0 for a lone window, the unitary coordinator's
one group, on its own grid; 0 or 1 for two windows, `first_window`), its window
`self.windows[group]`."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class HybridRules:
    def _window_hit(self, hashes: list[int], limit_tokens: int, group: int | None = None,
                    drop: bool | None = None) -> list[int]:
        """The rightmost run of cdiv(window - 1, size) cached blocks within `limit_tokens`
        whose right edge is on a scheduler block boundary (the nulls before it), else the run
        from block 0. With EAGLE the run is a block longer and its right edge one block past
        the boundary, then that block is dropped (and the hit cut back to the grid). `drop`:
        whether this lookup takes EAGLE's drop (by default the group's `use_eagle`; the
        multi-pass search drops once per candidate length)."""
        group = self.second if group is None else group
        size = self.sizes[group]
        eagle = self.drops(group) if drop is None else drop
        need, limit = cdiv(self.windows[group] - 1, size) + eagle, limit_tokens // size
        out, run = [0] * limit, 0
        for index in range(limit - 1, -1, -1):
            found = self.pool.map.get((hashes[index], group))
            if found:
                if run == 0 and (index + 1 - eagle) * size % self.align:
                    self.marks.append("window hit: a block off the scheduler grid passed")
                    continue  # a run must end where a hit can
                out[index] = found[0]
                run += 1
                if run >= need:
                    out = out[:index + run]
                    break
            else:
                run = 0
        else:
            out = self._on_grid(out[:run], group)
        if eagle and out:
            self.marks.append("EAGLE: a window hit drops its last block")
            out = self._on_grid(out[:-1], group)
        return out

    def _fixed_point_hit(self, hashes: list[int], longest: int):
        """Two sliding windows (no full attention): the hybrid coordinator's search for the
        fixed point of both groups' hits. Each pass asks every group in turn for its own hit
        within the candidate, which it may only shorten; a pass that shortened it starts
        another, until one keeps it. With EAGLE a group looks one of its blocks further and
        drops one only the first time at a candidate: a later pass asks it without the drop,
        unless a group without the drop shortened the candidate since. Returns each group's
        blocks of its last lookup, the hit, and the longest candidate any lookup left where it
        is longer than the hit (the shared-prefix boundary), else 0."""
        hit, longest_seen, verified = longest, 0, set()
        blocks: list[list[int]] = [[] for _ in self.groups]
        while True:
            candidate = hit
            for group in self.groups:
                size, drop = self.sizes[group], self.drops(group) and group not in verified
                limit = min(candidate + size, len(hashes) * self.h) if drop else candidate
                blocks[group] = self._window_hit(self.group_hashes(hashes, group), limit,
                                                 group, drop)
                found = len(blocks[group]) * size
                if drop:
                    verified.add(group)
                elif found < candidate:
                    verified.clear()  # a shorter candidate: each group drops at it again
                candidate = found
                longest_seen = max(longest_seen, candidate)
            if candidate >= hit:
                break
            hit = candidate
            self.marks.append("two windows: the hit search takes another pass")
        return blocks, hit, longest_seen if longest_seen > hit else 0

    def _on_grid(self, blocks: list[int], group: int) -> list[int]:
        """The window's blocks cut back to end on the scheduler grid."""
        size = self.sizes[group]
        return blocks[:len(blocks) * size // self.align * self.align // size]

    def _local_hit(self, hashes: list[int], limit_tokens: int) -> list[int]:
        """Chunked-local attention: the blocks before the chunk of the token after
        `limit_tokens` null (outside every later token's chunk, as if computed), then the run
        of cached blocks from there up to `limit_tokens`."""
        size = self.sizes[1]
        start = limit_tokens // self.local * self.local // size
        out = [0] * start
        for index in range(start, limit_tokens // size):
            found = self.pool.map.get((hashes[index], self.second))
            if not found:
                break
            out.append(found[0])
        if start:
            self.marks.append("chunked-local hit: blocks before the chunk null")
        return out

    def _reachable(self, start: int, end: int, prompt_tokens: int,
                   shared_boundary: int, group: int) -> set[int] | None:
        """The sliding-window blocks of [start, end) that are cached (None: all of them): a
        window's worth (cdiv(window - 1, block size) blocks) before each segment's end, the
        segment the retention interval, or without one (dense) the scheduler block size; with
        retention set, the same before each boundary a later hit can stop at (the prompt's
        last token, the shared-prefix junction), each cut to the scheduler block size; every
        block when a window spans a segment."""
        size, eagle = self.sizes[group], self.drops(group)
        # With EAGLE a hit's run is a block longer and ends a block past the boundary (shift)
        need, shift = cdiv(self.windows[group] - 1, size) + eagle, int(eagle)
        segment = self.align if self.retention is None else self.retention
        if segment:
            per_segment = segment // size
            if need >= per_segment:
                return None
            keep = {i for i in range(start, end)
                    if i >= shift and (i - shift) % per_segment >= per_segment - need}
        else:
            keep = set()
        if self.retention is None:
            return keep
        for boundary in self._replay_boundaries(prompt_tokens, shared_boundary, group):
            stop = boundary // self.align * self.align // size + shift
            keep |= set(range(max(start, stop - need), min(end, stop)))
        return keep

    def _replay_boundaries(self, prompt_tokens: int, shared_boundary: int,
                           group: int) -> list[int]:
        """Where a later hit of this prompt can stop: a resend's num_tokens - 1; with EAGLE
        (any group dropping: the coordinator's rule) a scheduler block below a resend's and a
        longer sibling's aligned ends (each drops a block); and the shared-prefix junction
        (with the window's group dropping also a window block below it: a sibling diverging
        right after it has no block to peek at)."""
        if self.eagle:
            align = self.align
            stops = {max(0, (prompt_tokens - 1) // align * align - align),
                     max(0, prompt_tokens // align * align - align)}
        else:
            stops = {prompt_tokens - 1}
        if shared_boundary:
            stops |= {shared_boundary} | ({shared_boundary - self.sizes[group]}
                                          if self.drops(group) else set())
        return sorted(stops)

    def _cache_partial_tail(self, rid: int, hashes: list[int], tokens, prompt_tokens: int,
                            cacheable: int) -> None:
        """Full attention in blocks of more than one hash unit: the hash boundary before the
        prompt's last token, where it falls inside a block the step has cached, also names
        that block (a partial entry; every step that caches registers it, once)."""
        # (an EAGLE lookup reads the whole prompt before it drops a hash unit)
        limit = prompt_tokens if self.drops(0) else prompt_tokens - 1
        boundary = min(limit // self.h, len(hashes)) * self.h
        if boundary == 0 or boundary > cacheable or boundary % self.bs == 0:
            return
        table = self.tables[0][rid]
        if boundary // self.bs < len(table):
            block, key = table[boundary // self.bs], (hashes[boundary // self.h - 1], 0)
            if self.pool.key[block] != key and block not in self.pool.map.get(key, ()):
                self.marks.append("partial entry registered")
            self.pool.cache_partial_block(self.prompt(rid, hashes, tokens),
                                          table[boundary // self.bs],
                                          boundary // self.h, 0, self.bs)
