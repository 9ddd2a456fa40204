"""vLLM's prefix-cache stats (`PrefixCacheStats`, vllm 0.33.0) as the manager keeps them: each
admission of a request recorded once, as a new one or as one preempted before, with the tokens
it queried and those that hit; `reset` once the cache was reset since the stats were last made.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefixStats:
    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    reset: bool = False

    def record(self, num_tokens: int, hits: int, preempted: bool) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += hits

    def as_tuple(self) -> tuple:
        # (field by field: `dataclasses.astuple` deep-copies each value, and the stats are made
        # after every op of a trace that records them)
        return (self.requests, self.queries, self.hits, self.preempted_requests,
                self.preempted_queries, self.preempted_hits, self.reset)
