"""The Mamba state a step reads, as vLLM 0.33.0's worker reads it
(`oracle/kvmanager/mamba_align.py`'s `worker_columns` and `read_problems`, judged in the reduced
"align" mode by `fuzz/kvmanager/align_reads.py`; docs/upstream-vllm.md, "The state a step
reads"). The question it settles: the release frees the block holding the state a step read
(e.g. "mamba align" index 20, r2's hit state at column 1, freed by its next, refused, step): the
worker never reads it again, as its next step copies from the column the last step wrote. What
the worker does read is always still the request's on the release; a mutant freeing it one step
early is caught by this check alone. The whole prompt a connector loads, recomputed from a null
column, is what vLLM's connectors never make (pinned below with the exemption off)."""

from dataclasses import replace

from kvfuzz.oracle.kvmanager.mamba_align import read_problems, worker_columns
from tests.helpers import divergence, with_engine

_ENGINE = with_engine("vllm")  # (slow: it imports vLLM)
MUTANT = "mutant.vllm.kvmanager.mamba_align_read_state_freed"


def test_the_columns_a_step_reads_and_writes():
    assert worker_columns(0, 6, 4, None) == (None, 1)   # a first step: nothing read
    assert worker_columns(8, 12, 4, None) == (1, 2)     # new to the worker: (c - 1) // b
    assert worker_columns(12, 13, 4, 2) == (2, 3)       # running: the column it last wrote
    assert worker_columns(9, 10, 4, 3) == (3, 2)        # drafts rolled back: still that one


def test_a_read_of_a_block_the_request_no_longer_holds_is_a_problem():
    # the worker's copy keeps block 3 at column 1; the scheduler nulled it (freed)
    assert read_problems([0, 3, 7], [0, 3, 7], 1, 2) is None
    assert read_problems([0, 3, 7, 8], [0, 0, 7, 8], 2, 3) is None   # column 1 not read
    assert "freed before the worker read them" in read_problems([0, 3, 7, 8], [0, 0, 7, 8], 1, 3)
    assert "holds no block" in read_problems([0, 0, 7], [0, 0, 7], 1, 2)
    # a scratch block moved to the end is still the request's (`_relocate_speculative_block`)
    assert read_problems([0, 3, 7, 8, 7], [0, 3, 0, 8, 7], 1, 3, speculative=1) is None
    # the written column: the scheduler's own block there
    assert "holds another block or none" in read_problems([0, 3, 7], [0, 3, 9], 1, 2)
    assert "holds another block or none" in read_problems([0, 3, 7, 8], [0, 3, 7, 0], 1, 2,
                                                          speculative=1)


@_ENGINE
def test_index_20_reads_the_hit_then_the_column_its_step_wrote():
    """"mamba align" index 20's r2 (the trace the stricter kept-states rule failed on): admitted on
    an 8-token hit hashed per 2, its step 8 to 12 reads column 1 (the hit's block, which r1 holds
    too); its next step is refused and nulls column 1 (the worker's copy keeps it); the step after
    reads column 2, the one the first step wrote."""
    from kvfuzz.bench.mamba_reads import walk

    lines = walk("mamba align", 20, 2)
    assert "step 8->12: reads column 1 (block 3, ref 2, also r1), writes column 2" in lines[1]
    assert "mamba [0, 0, 7, 8, 9]  worker [0, 3, 7, 8, 9]" in lines[2]
    assert "step 12->15: reads column 2 (block 7, ref 1), writes column 3" in lines[3]
    assert lines[-1] == "verdict: agrees"


@_ENGINE
def test_the_release_agrees_and_reads_what_its_requests_hold():
    from kvfuzz.fuzz.kvmanager import align_reads
    from kvfuzz.fuzz.targets import TARGETS
    from kvfuzz.strategies.kvmanager import streams

    target = TARGETS["kvmanager"]
    released, events = target.catalogue.resolve("vllm.kvmanager"), {}
    for profile in ("mamba align", "mamba connector"):
        for index in range(10):
            outcome = target.check(streams.ALONE[profile].generate(0, index), released)
            assert outcome.divergence is None, (profile, index, outcome.divergence)
            for name in align_reads.EVENTS:
                events[name] = events.get(name, 0) + outcome.features[name]
    assert events[align_reads.COPIED] > 100 and events[align_reads.READ] > 300, events
    assert events[align_reads.WHOLE] > 0, events


@_ENGINE
def test_a_whole_prompt_loaded_is_recomputed_from_a_null_column(monkeypatch):
    """"mamba connector" index 4's r2: a 9-token prompt loaded whole (its state at column 2); the
    scheduler sets it back a token (`_update_waiting_for_remote_kv`), so the worker's first step
    copies column (8 - 1) // 4 = 1, a null, over the loaded state. vLLM's connectors load at most
    N - 1 tokens beside a Mamba group; judged, the release fails here."""
    from kvfuzz.fuzz.kvmanager import align_reads
    from kvfuzz.strategies.kvmanager import streams

    leave = align_reads.AlignReads.leave_worker

    def never_whole(self):
        leave(self)
        self.ends_before = {}
    # (without the EAGLE draw the profile made there since 2026-12-07: the trace as before)
    trace = replace(streams.ALONE["mamba connector"].generate(0, 4), eagle=False)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    monkeypatch.setattr(align_reads.AlignReads, "leave_worker", never_whole)
    found = divergence("kvmanager", trace, "vllm.kvmanager")
    assert found is not None and found.what.startswith("mamba reads at op 19"), found


@_ENGINE
def test_only_the_read_check_catches_a_state_freed_one_step_early(monkeypatch):
    from kvfuzz.fuzz.kvmanager import align_reads
    from kvfuzz.strategies.kvmanager import streams

    # (as it was before the profile's lookahead-hashes draw, which index 15 now carries)
    trace = replace(streams.ALONE["mamba align"].generate(0, 15), hash_lookahead=0,
                    prefill_lookahead=0)
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    found = divergence("kvmanager", trace, MUTANT)
    assert found is not None and found.what.startswith("mamba reads"), found
    monkeypatch.setattr(align_reads.AlignReads, "read_step_problems", lambda *args: [])
    assert divergence("kvmanager", trace, MUTANT) is None
