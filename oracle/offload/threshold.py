"""The store threshold's tracker of vLLM's CPU offloading manager (its `counts`): how often each
key was seen, at most `size` keys, oldest out first. A key is stored only once its count reaches
the threshold. What counts, by release (oracle/offload/contract.py):

| counting | release   | a count is                         | a full tracker drops               |
|----------|-----------|------------------------------------|------------------------------------|
| offer    | 0.30 on   | an offer (prepare_store) of a key  | its oldest key outside this offer; |
|          |           |                                    | none left: the new key is not kept |
| key      | 0.29      | the same, one key at a time        | its oldest key, even of this offer |
| lookup   | 0.24-0.28 | a lookup of a key                  | its oldest key                     |

A key seen again moves to the newest end."""

from __future__ import annotations

from collections import OrderedDict


class Tracker:
    def __init__(self, size: int, counting: str = "offer"):
        self.size, self.counting = size, counting
        self.counts: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self):
        return iter(self.counts)  # oldest first

    def get(self, key, default: int = 0) -> int:
        return self.counts.get(key, default)

    def offered(self, keys) -> None:
        if self.counting == "offer":
            self._offer(list(keys))
        elif self.counting == "key":
            for key in keys:
                self._one(key)

    def looked_up(self, keys) -> None:
        if self.counting == "lookup":
            for key in keys:
                self._one(key)

    def _one(self, key) -> None:
        if key in self.counts:
            self.counts[key] += 1
            self.counts.move_to_end(key)
            return
        if len(self.counts) >= self.size:
            self.counts.popitem(last=False)
        self.counts[key] = 1

    def _offer(self, keys) -> None:
        again = [key for key in keys if key in self.counts]
        for key in again:
            self.counts[key] += 1
            self.counts.move_to_end(key)
        room_to_drop = len(self.counts) - len(set(again))
        for key in keys:
            if key in self.counts:
                continue
            if len(self.counts) >= self.size:
                if room_to_drop == 0:
                    continue
                self.counts.popitem(last=False)
                room_to_drop -= 1
            self.counts[key] = 1
