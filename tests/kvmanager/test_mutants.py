"""Each broken vLLM `KVCacheManager` (and its parts) (the released source with one edit) is caught
by the seeded lock step with a readable, shrunk report that names the op, the field or invariant,
and the replay command; the released class agrees on the shrunk trace. Skips without vLLM."""

import pytest

from tests.helpers import (TARGETS, assert_caught_with_a_shrunk_report, divergence, mutant_tests,
                           mutants)

PREFIX = "mutant.vllm.kvmanager."
EXPECTED = {PREFIX + name: pattern for name, pattern in {
    "last_token_hit": r"prefix hit:? +expected \d+ tokens|shared prefix boundary",
    # the caller's cap ignored: a hit past it
    "caller_cap_ignored": r"prefix hit:? +expected \d+ tokens|shared prefix boundary",
    # and at a KV connector's lookup (the "capped connector" profile)
    "connector_cap_ignored": r"prefix hit:? +expected \d+ tokens",
    "exact_fit_refused": r"None vs success:? +expected \[",
    # Caching one block more than the table holds: a hash on a block not yet written, or
    # (under sparse retention) vLLM's own mask-length assertion.
    "caches_unwritten_block": r"block hash|hash map|assert block_mask is None",
    "window_moves_early": r"result:? +allocate_slots|block table|free queue|num free|consumed",
    "free_first_group_only": r"num free|ref_cnt|lost",
    # Counted short, the allocation asks the pool for more than it has (vLLM's ValueError), or
    # succeeds where the watermark or the whole-request check should have refused it.
    "evictable_hits_not_counted": r"Cannot get \d+ free blocks from the pool|None vs success",
    "free_head_first": r"free queue:? +first difference",
    "hit_not_touched": r"ref_cnt|invariant|consumed",
    "window_keeps_first_block": r"block table|consumed|num free",
    "hybrid_hit_not_trimmed": r"prefix hit:? +expected \d+ tokens",
    "whole_request_unchecked": r"None vs success:? +expected None",
    "sparse_tail_one_block_early": r"block hash|hash map|prefix hit",
    "watermark_for_running": r"None vs success",
    # A reused block keeps its hash: kvfuzz sees the stale hash, or vLLM's own assertion fires
    # when the block is cached again.
    "pool_reuse_keeps_hash": r"block hash:? +block \d+: expected no hash|block_hash_num_tokens",
    "lookahead_not_allocated": r"result:? +allocate_slots|None vs success|consumed",
    "in_flight_ignored": r"consumed|block table|free queue|num free|result",
    "skip_reading_ignored": r"prefix hit:? +expected 0 tokens",
    "zero_tokens_accepted": r"rejection:? +allocate_slots: expected the call refused",
    "stats_preempted_as_new": r"prefix cache stats:? +.*expected \(\d+, \d+, \d+, [1-9]",
    "reset_not_in_stats": r"prefix cache stats:? +.*True\), actual .*False\)",
    "hit_report_skipped": r"KV events:? +the op: event \d+ of \d+ expected",
    "events_unannotated": r"KV events:? +.*kind='full_attention'|KV events:? +.*sliding_window",
    "estimate_takes_longest": r"estimate_cached_tokens:? +r\d+: expected \d+, actual \d+",
    "computed_ids_unclipped": r"block_ids_for_computed_tokens:? +r\d+: expected",
    "truncate_one_block_long": r"result:? +first difference|result:? +expected",
    "retained_tokens_freed": r"consumed|block table|free queue|num free|result",
    "eagle_block_kept": r"prefix hit:? +expected \d+ tokens",
    # The hybrid sizes profile: a hit off the scheduler grid (its length, its blocks, or the
    # junction it leaves); a block cached past the grid; a partial entry at the wrong boundary.
    "hybrid_hit_off_grid": r"prefix hit:? +expected \d+ tokens|shared prefix boundary",
    "hybrid_caches_off_grid": r"block hash|hash map|KV events",
    "partial_tail_past_prompt": r"block hash|hash map|KV events",
    "local_chunk_freed_early": r"consumed|block table|free queue|num free|result|None vs",
    "mamba_state_freed": r"consumed|block table|free queue|num free|result|None vs",
    # ... with speculative blocks (the "mamba" profile's MTP share): one taken short
    "mamba_speculative_one_short": r"result:? +allocate_slots|block table|consumed|num free",
    # EAGLE beside a window (the "eagle window" profile): every hit a block short.
    "eagle_margin_dropped": r"prefix hit:? +expected \d+ tokens|shared prefix boundary",
    # Mamba "align" (the "mamba align" profile, the rule of which states a request's table
    # keeps): a state moved past never freed; a state written past the request's last token.
    "mamba_align_state_kept": r"mamba states:? +states that left their tables still referenced"
                              r"|ref_cnt:? +reference counts against the live tables",
    "mamba_align_lookahead_state": r"mamba states:? +r\d+'s Mamba table \d+ blocks after",
    # its prefill checkpoint block (`Trace.mamba_checkpoint`): missing where the rule takes
    # one, or taken by a chunk that does not end the prefill (retention 0)
    "mamba_align_checkpoint_not_taken": r"mamba states:? +r\d+'s Mamba table holds no "
                                        r"checkpoint block",
    "mamba_align_checkpoint_every_chunk": r"mamba states:? +r\d+'s Mamba table holds states "
                                          r"at positions",
    # under lookahead hashes (`Trace.hash_lookahead`) its checkpoint reserved where hashes
    # looking no tokens ahead would put it: keyed there, past the request's hashes (since
    # the caching check, often seen first as a checkpoint keyed where the release keys none)
    "mamba_align_checkpoint_lookahead_ignored": r"assert 0 < num_hash_blocks <= "
                                                r"len\(request.block_hashes\)|mamba states"
                                                r"|which blocks cached",
    # with EAGLE's drop (`Trace.eagle`) its checkpoint reserved where it would be without it
    "mamba_align_checkpoint_eagle_ignored": r"mamba states:? +r\d+'s Mamba table"
                                            r"|which blocks cached",
    # ... and the Mamba lookup given EAGLE's margin (never dropped): a hit past full attention's
    "mamba_align_eagle_margin_to_mamba": r"prefix hit",
    # ... and with multi-module MTP, the Mamba group holding none of its k - 1 tokens back: a
    # state cached before the tokens it holds are finalized
    "mamba_align_mtp_held_ignored": r"which blocks cached:? +after schedule",
    # ... and with the shared-prefix checkpoint on, the junction's state never keyed
    "mamba_align_shared_prefix_junction_missed": r"shared-prefix checkpoint:? +r\d+: a prefill "
                                                 r"step from \d+ to the shared-prefix junction",
    # its speculative blocks (`Trace.mamba_speculative`) counted but never allocated
    "mamba_align_speculative_dropped": r"mamba states:? +r\d+'s Mamba table \d+ blocks after "
                                       r"\d+ computed tokens in blocks of \d+ and \d+ "
                                       r"speculative",
    # under retention 0, no state kept at the replay boundary a resend resumes from
    "mamba_align_replay_state_dropped": r"retention:? +r\d+: a step to \d+ tokens of a "
                                        r"\d+-token prompt wrote the state at its replay",
    # its count (`oracle/kvmanager/align_count.py`): a block high, an exact fit refused
    "mamba_align_cap_one_more": r"None vs success:? +r\d+: allocate_slots of .* expected "
                                r"blocks",
    # its hit's length (`oracle/kvmanager/align_hit.py`): the hybrid search's lookups a hash
    # block short (the mix's "chunked local" trace at index 4 catches it first, by the oracle);
    # the Mamba group's partial entries ignored
    "mamba_align_hit_short": r"prefix hit:? +expected \d+ tokens",
    "mamba_align_partial_hit_ignored": r"prefix hit:? +expected \d+ tokens, actual \d+: full "
                                       r"attention's entries cover",
    # HiSparse (the "hisparse" profile): a retained host hit kept past the tokens adopted; a
    # host page published before its write-back is done.
    "hisparse_retained_hit_kept": r"retained hit:? +r\d+: a hit of \d+ tokens",
    "hisparse_published_before_durable": r"published early:? +host blocks \[",
    # A second connector's import into the host pool (the "hisparse import" profile): the
    # coordinator told it fills the local hit only, so its pages never publish.
    "hisparse_import_covers_hit_only": r"published late:? +r\d+: source blocks",
    # HiSparse's unpinned resident pages prepended (the "hisparse cow" profile): the free
    # queue's order only (`fuzz/kvmanager/hisparse_queue.py`)
    "hisparse_unpinned_reused_first": r"free queue:? +device pool after the op",
    # the host's prompt partial tail never published (the "hisparse cow" profile): the host
    # pool's entries predicted op by op only (`fuzz/kvmanager/hisparse_hostcache.py`)
    "hisparse_host_tail_not_published": r"host cache map:? +host pool: block \d+: expected",
    # a freed request's clean pages unpinned head first (the "hisparse cow" profile): the order
    # of one op's frees at the device queue's tail only (`fuzz/kvmanager/hisparse_order.py`)
    "hisparse_free_unpins_head_first": r"free queue:? +device pool after the op: \[",
    # the resident pages given no blocks for the lookahead slots (the "hisparse cow" profile's
    # traces with lookahead slots): the resident table's length
    "hisparse_resident_lookahead_unbacked": r"block table:? +r\d+: \d+ tokens computed and \d+ "
                                            r"lookahead slots",
    # Cross-attention (the "cross attention" profile): its group sized by the wrong tokens.
    "cross_sized_by_decoder": r"result:? +allocate_slots|consumed|None vs|crash",
    # KV connectors (the "connector" profile): external tokens on the null block; an
    # asynchronous load cached at admission; the reserved blocks taken; a load's own blocks
    # recorded for zeroing, a failed load's first block past its valid prefix not; a hit
    # said to diverge without a Mamba group.
    "external_on_null_block": r"external blocks|result:? +allocate_slots|block table",
    "delayed_load_cached": r"cached before the load|block hash|hash map",
    "reserved_blocks_ignored": r"None vs success:? +expected None",
    "loaded_blocks_zeroed": r"zeroing:? +take_new_block_ids: expected",
    "zeroing_skips_first_block": r"zeroing:? +take_new_block_ids: expected",
    # Zeroing's records: a new block left out, or the records kept after they were taken.
    "new_block_not_zeroed": r"zeroing:? +take_new_block_ids: expected",
    "zeroing_records_kept": r"zeroing:? +take_new_block_ids: expected",
    # A load of some groups only: the groups it does not write left unzeroed too.
    "partial_load_skips_all_zeroing": r"zeroing:? +take_new_block_ids: expected",
    "connector_hit_diverged": r"hit_diverged expected False, actual True",
    # Deferred frees (the "deferred frees" profile): the popped blocks' order, or a group's
    # blocks left in their table.
    "deferred_free_reversed": r"deferred free:? +pop_blocks_for_free: expected blocks",
    "deferred_free_first_group_only": r"deferred free:? +pop_blocks_for_free: expected blocks",
    # The window's skipped blocks left in a finishing request's table (its remove_skipped op).
    "finished_window_kept": r"block table:? +r\d+: expected|num free|free queue",
    # Requests with extra hash keys (the "extra keys" profile): a block's hash without its
    # LoRA adapter, with the salt past the first block, or an image's key without its offset.
    "lora_key_dropped": r"block hash|hash map|prefix hit",
    "salt_on_every_block": r"block hash|hash map|prefix hit",
    "mm_offset_ignored": r"block hash|hash map|prefix hit",
    "event_keys_from_step_start": r"KV events:? +the op",
    # Lookahead hashing (the "lookahead hashes" profile): a block hashed before the tokens its
    # hash covers exist.
    "lookahead_hash_early": r"block hash|hash map|prefix hit|KV events|estimate_cached_tokens",
    # EAGLE groups flagged apart (the "eagle groups" profile): every group drops, or caches
    # the peek block, where only the flagged one should.
    "eagle_drop_every_group": r"prefix hit|shared prefix boundary|block hash|hash map",
    "eagle_peek_every_group": r"block hash|hash map|KV events|prefix hit",
    # Multi-token prediction (the "mtp" profile): re-prefillable tokens cached.
    "mtp_reprefillable_cached": r"block hash|hash map|KV events|prefix hit",
    "mtp_peek_past_finalized": r"block hash|hash map|KV events|prefix hit",
    # Prompt embeddings (the "prompt embeds" profile): the embeddings left out of the hash.
    "embeds_key_dropped": r"block hash|hash map|prefix hit",
    # Spec-decode padding (the "lookahead hashes" profile's padded admissions): the
    # placeholder draft rows left without slots.
    "spec_pad_rows_clamped": r"allocate_slots: new blocks|None vs success|num free",
    # The same under a KV connector (the "connector" profile's padded admissions): a
    # synchronous load's padded last token, and the padded resumption after a load.
    "spec_pad_external_clamped": r"allocate_slots: new blocks|None vs success|num free",
    "spec_pad_resumed_clamped": r"allocate_slots: new blocks|None vs success|num free",
    # Groups of different block sizes under a KV connector (the "connector sizes" profile):
    # a group's external blocks counted to the scheduler block.
    "external_to_scheduler_block": r"consumed|block table|external blocks|None vs success",
    # A KV connector beside a Mamba "align" group (the "mamba connector" profile): a Mamba
    # hit cut to the block for a longer load keeps its partial state, cached, as the load's.
    "mamba_truncate_keeps_partial_state": r"cached before the load|external blocks",
    # ... and its partial state moved into the cut view's last block, adopted only by a hit
    # admitted block-aligned with nothing loaded (the caller's cap dropped the load)
    "mamba_truncate_shifts_partial_state": r"which blocks|free queue|mamba reads",
    # ... and the finish's remove_skipped_blocks there: the state of the last token freed (since
    # 2026-12-06 caught first at a step, where it frees the state the step reads: its corpus
    # case, `test_mamba_finish.py`, is still caught by the finish's call alone)
    "mamba_finish_frees_last_state": r"remove_skipped:? +remove_skipped_blocks\(r\d+, \d+\) "
                                     r"in blocks of \d+|mamba reads:? +r\d+'s step from",
    # A KV connector beside a Mamba group in mode "none" or "all" (the "mamba plain
    # connector" profile): an admission with external tokens counts their null states
    "mamba_plain_external_states_counted": r"None vs success:? +expected \[",
    # ... and at a step, the block the worker copies the step's state from (`align_reads.py`)
    "mamba_align_read_state_freed": r"mamba reads:? +r\d+'s step from \d+ to \d+ tokens",
    # A request finishing with tokens in flight beside the group (asynchronous scheduling,
    # `align_async.py`): its partial tail handed off all the same
    "mamba_align_tail_in_flight": r"boundary offload:? +finalize_partial_tail_offloads\(r\d+\)",
    # The states a step moved past freed front first: only the free queue's order shows it
    # (`align_queue.py`)
    "mamba_align_skipped_front_first": r"free queue:? +after \w+\(r\d+\): expected",
    # KV events beside the group (`align_events.py`): a transient checkpoint's entries dropped
    # without a Removed, so the events' replay still holds them
    "mamba_align_checkpoint_removed_silently": r"KV events:? +after the op's \d+ events: the "
                                               r"KV events say hash \d+ \(group 1\)",
    # Which blocks are cached beside the group (`align_caching.py`): full attention's prompt
    # tail keyed at the prompt's end (EAGLE's limit) without EAGLE
    "mamba_align_prompt_tail_as_eagle": r"which blocks cached:? +after schedule\(r\d+\): block "
                                        r"\d+: expected None, actual \(\d+, 0\)",
    # ... with a KV connector (`align_caching_external.py`): a load done caching a token short
    # keys the Mamba state of its last token under the hash of the token before
    "mamba_align_load_caches_token_short": r"which blocks cached:? +after loaded\(r\d+\): "
                                           r"block \d+: expected None, actual \(\d+, 1\)",
    # ... and a settle's (`align_caching_settle.py`): one token more than asked, cached
    "mamba_align_settle_one_token_long": r"which blocks cached:? +after settle\(r\d+\): block "
                                         r"\d+: expected None, actual \(\d+, [01]\)",
    # EAGLE's drop with a KV connector (`align_external_eagle.py`): the connector's per-group
    # lookup giving full attention the margin but not the drop, or the Mamba group the margin
    "mamba_connector_eagle_drop_skipped": r"prefix hit:? +get_computed_blocks_for_connector: "
                                          r"expected hit \d+",
    "mamba_connector_eagle_margin_to_mamba": r"prefix hit:? +get_computed_blocks_for_connector: "
                                             r"expected hit \d+",
    # the margin's top as cap << margin: only under the caller's cap ("capped mamba")
    "mamba_connector_eagle_margin_shifted": r"prefix hit:? +get_computed_blocks_for_connector: "
                                            r"expected hit \d+",
    # Multi-module MTP's held-back tokens with a connector (`align_external_mtp.py`): a load
    # done caching its k - 1 last loaded tokens
    "mamba_connector_mtp_load_finalized": r"which blocks cached:? +after loaded",
    # Hits reported beside the group (`align_reported.py`): a hit inside the prompt's last
    # block reported one block short, where the release raises
    "mamba_align_report_clamped": r"KV events:? +a hit reported inside the prompt's last "
                                  r"block",
}.items()}
# Mutants only one profile reaches whose share of the mix lies past the indices the search
# below reads (its first index 337): each caught on that profile's own trace `index` of seed 0
ALONE = {PREFIX + "external_to_scheduler_block": ("connector sizes", 0),
         # the caller's cap on a lookup ignored: the "capped hits" profile alone caps
         PREFIX + "caller_cap_ignored": ("capped hits", 0),
         # and at a KV connector's lookup: "capped connector" alone caps it (shrunk to 4 ops,
         # corpus/kvmanager-4827086012ddd7c4.json: a 5-token prompt's lookup capped at 0 hits
         # 4 tokens on the mutant)
         PREFIX + "connector_cap_ignored": ("capped connector", 0),
         PREFIX + "mamba_truncate_keeps_partial_state": ("mamba connector", 14),
         # the first "capped mamba" trace of seed 0 whose partial tail is dropped for a load
         # the cap then drops, its block-aligned hit admitted (before 2026-12-07 the judge
         # admitted the whole local hit there, and no trace of 2,000 caught it)
         PREFIX + "mamba_truncate_shifts_partial_state": ("capped mamba", 149),
         PREFIX + "mamba_finish_frees_last_state": ("mamba connector", 0),
         # the first "mamba plain connector" trace of seed 0 that catches it (a KV connector
         # beside a Mamba group in mode "none" or "all", alone only since 2026-12-08; index 0
         # caught it until the profile's MTP share, 2026-12-08, drew it: with 2 draft tokens
         # its refusal at the watermark is gone)
         PREFIX + "mamba_plain_external_states_counted": ("mamba plain connector", 1),
         # the first "mamba" trace of seed 0 with speculative Mamba blocks in mode "none" or
         # "all" (the profile's MTP share since 2026-12-08; shrunk to 2 ops,
         # corpus/kvmanager-0259d22976a4efbf.json: a 1-token prompt's admission, 3 draft
         # tokens, the mutant takes 4 Mamba blocks where the release takes 5)
         PREFIX + "mamba_speculative_one_short": ("mamba", 5),
         # the first "mamba align" trace of seed 0 with an exact fit at the Mamba cap
         PREFIX + "mamba_align_cap_one_more": ("mamba align", 9),
         # the first "mamba align" trace of seed 0 with a partial hit's step read one step on
         # (index 15 until the profile's lookahead-hashes draw took it: 37 is the first without
         # them whose first divergence is the read's)
         PREFIX + "mamba_align_read_state_freed": ("mamba align", 37),
         # the first "mamba align" trace of seed 0 with lookahead hashes
         PREFIX + "mamba_align_checkpoint_lookahead_ignored": ("mamba align", 13),
         # the first "mamba align" trace of seed 0 with EAGLE's drop
         PREFIX + "mamba_align_checkpoint_eagle_ignored": ("mamba align", 0),
         PREFIX + "mamba_align_eagle_margin_to_mamba": ("mamba align", 0),
         # the first "mamba align" trace of seed 0 with multi-module MTP beside EAGLE's drop
         # whose step stops a token or two short of finalizing a state (index 0 has k = 3
         # too; the mutant agrees there); corpus case kvmanager-91a84774d3013c20.json
         PREFIX + "mamba_align_mtp_held_ignored": ("mamba align", 6),
         # the first "mamba align" trace of seed 0 with the shared-prefix checkpoint whose
         # step ends at a junction (12 and 26 have it on; the mutant agrees there)
         PREFIX + "mamba_align_shared_prefix_junction_missed": ("mamba align", 34),
         # a "mamba align" trace of seed 0 finishing a request with a keyed partial
         # tail and a step in flight (shrunk to 3 ops)
         # (403 until 2026-12-07's preemptions after a refusal reshaped the asynchronous
         # traces: 761 the first of seed 0 then, 1519 and 1642 after it)
         PREFIX + "mamba_align_tail_in_flight": ("mamba align", 761),
         # the first "mamba align" trace of seed 0 observing KV events with a transient
         # checkpoint dropped (shrunk to 2 ops)
         PREFIX + "mamba_align_checkpoint_removed_silently": ("mamba align", 26),
         # the first "mamba align" trace of seed 0 hashed per fewer tokens than a block whose
         # prompt's tail is keyed (shrunk to 2 ops: a 1-token prompt)
         PREFIX + "mamba_align_prompt_tail_as_eagle": ("mamba align", 2),
         # the first "mamba connector" trace of seed 0 (a 2-token prompt loaded whole; shrunk
         # to 3 ops); with the caching check off it agrees there (caught on 4 of the first
         # 200, late, by what the wrong key does to later counts and hand-offs)
         PREFIX + "mamba_align_load_caches_token_short": ("mamba connector", 0),
         # the first "mamba align" trace of seed 0 with a settle one token short of a block's
         # end (the asynchronous traces before it catch nothing; shrunk to 10 ops)
         PREFIX + "mamba_align_settle_one_token_long": ("mamba align", 35),
         # the first "mamba connector" trace of seed 0 with EAGLE's drop (since 2026-12-07;
         # shrunk to 4 ops, kvmanager-1e408bd2ab9d116a.json), and the first whose Mamba state
         # at a prompt's last token the margin reaches (5 has EAGLE too and agrees; shrunk to
         # 4 ops, kvmanager-42ecdfd70c2bea60.json)
         PREFIX + "mamba_connector_eagle_drop_skipped": ("mamba connector", 4),
         PREFIX + "mamba_connector_eagle_margin_to_mamba": ("mamba connector", 28),
         # the survivor of line 969 (`+` as `<<`), told apart by the caller's cap beside the
         # group: the first "capped mamba" trace of seed 0 (shrunk to 7 ops, corpus/kvmanager-
         # 7c845f12cd00e5c2.json: a 20-token prompt's connector lookup capped at 16, hit 18
         # flagged where the release falls back to the reconciled hit, 0 and boundary 14)
         PREFIX + "mamba_connector_eagle_margin_shifted": ("capped mamba", 0),
         # the first "mamba connector" trace of seed 0 with multi-module MTP (k = 2): r15's
         # load done at op 165 caches a block the release holds back (shrunk to 3 ops, a
         # 6-token prompt loaded whole: corpus/kvmanager-2d1c15d4d3a28cb9.json); "mamba
         # align" reaches it by a settle (its index 182 first)
         PREFIX + "mamba_connector_mtp_load_finalized": ("mamba connector", 28),
         # the first "hisparse cow" trace of seed 0 with an unpinned page's block handed out
         # (with the queue check off, the first 100 catch it once, at 88, by an adoption;
         # shrunk to 12 ops: corpus case kvmanager-e9c9c342aba5715f.json)
         PREFIX + "hisparse_unpinned_reused_first": ("hisparse cow", 1),
         # the first "hisparse cow" trace of seed 0 (a producer's prompt tail published on
         # the host; with the host cache map's check off, none of the first 100 catch it;
         # shrunk to 10 ops: corpus case kvmanager-b669c6ac4e5a496d.json)
         PREFIX + "hisparse_host_tail_not_published": ("hisparse cow", 0),
         # the first "hisparse cow" trace of seed 0 (a finish unpinning several clean pages;
         # with the order check off, none of the first 100 catch it; shrunk to 41 ops:
         # corpus case kvmanager-609392d6f77cf752.json)
         PREFIX + "hisparse_free_unpins_head_first": ("hisparse cow", 0),
         # the first "hisparse cow" trace of seed 0 (two lookahead slots; equivalent on a
         # trace without them: test_hisparse_lookahead.py)
         PREFIX + "hisparse_resident_lookahead_unbacked": ("hisparse cow", 0),
         # the first "mamba align" trace of seed 0 whose hit reported lies inside the prompt's
         # last block (a preempted 11-token prompt admitted again; shrunk to 4 ops:
         # corpus/kvmanager-838255ee58de4bf0.json)
         PREFIX + "mamba_align_report_clamped": ("mamba align", 89)}
# The connector profile's first traces of seed 0 (`kvmanager/5[connector]`, index 15 on; the
# traces before them never call its paths)
CONNECTOR = {PREFIX + name: 15 for name in (
    "external_on_null_block", "delayed_load_cached", "reserved_blocks_ignored",
    "loaded_blocks_zeroed", "zeroing_skips_first_block", "connector_hit_diverged",
    "new_block_not_zeroed", "zeroing_records_kept", "partial_load_skips_all_zeroing")}


_, test_mutant_is_caught_with_a_readable_shrunk_report = \
    mutant_tests("kvmanager", {name: pattern for name, pattern in EXPECTED.items()
                               if name not in ALONE}, lambda name: "vllm.kvmanager",
                 # its first divergence of seed 0: index 43, a "mamba align" trace with draft
                 # tokens (the 42 traces before it take some 4 s of CI)
                 first={PREFIX + "mamba_align_lookahead_state": 43, **CONNECTOR,
                        # the first "mamba align" trace of seed 0's mix that catches it (the
                        # mutant agrees on 7 and 22)
                        PREFIX + "mamba_align_skipped_front_first": 43,
                        # the "deferred frees" profile's first trace of seed 0
                        PREFIX + "deferred_free_reversed": 20,
                        PREFIX + "deferred_free_first_group_only": 20,
                        PREFIX + "finished_window_kept": 20,
                        # the "extra keys" profile's first trace of seed 0
                        **{PREFIX + name: 49 for name in ("lora_key_dropped",
                                                          "salt_on_every_block",
                                                          "mm_offset_ignored")},
                        # its second, the first with events that reach a later step's keys
                        PREFIX + "event_keys_from_step_start": 186,
                        # the "lookahead hashes" profile's first trace of seed 0
                        PREFIX + "lookahead_hash_early": 101,
                        # the "eagle groups" profile's fifth trace of seed 0 (the first four,
                        # from index 13, reach neither mutant; every other profile flags
                        # all groups or none, where both mutants are equivalent)
                        PREFIX + "eagle_drop_every_group": 367,
                        PREFIX + "eagle_peek_every_group": 367,
                        # the "mtp" profile's traces of seed 0 that reach each (206 first)
                        PREFIX + "mtp_reprefillable_cached": 423,
                        PREFIX + "mtp_peek_past_finalized": 242,
                        # the first "lookahead hashes" trace of seed 0 whose padded
                        # admission's rows need a block of their own (101 has none)
                        PREFIX + "spec_pad_rows_clamped": 143,
                        # the first "connector" traces of seed 0's mix whose padded
                        # admission (15), and padded resumption after a load (243), have
                        # rows past a block's end
                        PREFIX + "spec_pad_external_clamped": 15,
                        PREFIX + "spec_pad_resumed_clamped": 243,
                        # the "prompt embeds" profile's first trace of seed 0
                        PREFIX + "embeds_key_dropped": 10,
                        # the first "mamba align" traces of seed 0 with a prefill checkpoint
                        # block (index 7), and with one under retention 0 (index 22)
                        PREFIX + "mamba_align_checkpoint_not_taken": 7,
                        PREFIX + "mamba_align_checkpoint_every_chunk": 22,
                        # and the first with speculative Mamba blocks (index 22)
                        PREFIX + "mamba_align_speculative_dropped": 22,
                        # and the first with a chunk ending at the replay state under
                        # retention 0 (index 22)
                        PREFIX + "mamba_align_replay_state_dropped": 22,
                        # the first traces of seed 0's mix with a hybrid hit (a "chunked
                        # local" one, 4), and with a Mamba state cached inside a block that a
                        # lookup reaches (a "mamba align" one, 22; index 7 has none)
                        PREFIX + "mamba_align_hit_short": 4,
                        PREFIX + "mamba_align_partial_hit_ignored": 22,
                        # the first "hisparse" trace of seed 0's mix (73), and the first
                        # with a retained host hit an admission adopts (244; 147 and 182
                        # have none)
                        PREFIX + "hisparse_retained_hit_kept": 244,
                        PREFIX + "hisparse_published_before_durable": 73,
                        # the first "hisparse import" trace of seed 0's mix
                        PREFIX + "hisparse_import_covers_hit_only": 40,
                        # an "observed" trace (hits reported): index 19 was one until the
                        # connector stream took that draw; 203 is the first after it that
                        # catches the mutant (54 reports hits too, and the mutant agrees on it)
                        PREFIX + "hit_report_skipped": 203})


def test_every_mutant_has_an_expectation():
    assert sorted(EXPECTED) == sorted(m.name for m in mutants("kvmanager"))


# Mutants ALONE pins that a later (or alone-only) profile reaches too, each caught on that
# profile's trace `index` of seed 0 as well: the caller's cap dropped at HiSparse's lookups
# (2026-12-07, the "capped hisparse" profile; both shrink to the same 4 ops, corpus/kvmanager-
# ed5aa7cef18784a3.json: a 5-token prompt's connector lookup capped at 0 hits 4 on either)
ALONE_ALSO = [(PREFIX + "caller_cap_ignored", "capped hisparse", 0),
              (PREFIX + "connector_cap_ignored", "capped hisparse", 0),
              # the speculative Mamba block taken short under a connector (2026-12-08, the
              # "mamba plain connector" profile's MTP share; shrunk to 2 ops: a 6-token
              # prompt's synchronous load of 5 tokens, 2 draft tokens, the Mamba group's table
              # [0, 0, b, s, s] where the release's is [0, 0, b, s, s, s])
              (PREFIX + "mamba_speculative_one_short", "mamba plain connector", 0)]


@pytest.mark.slow
@pytest.mark.parametrize("name, profile, index",
                         sorted((name, *pinned) for name, pinned in ALONE.items()) + ALONE_ALSO)
def test_a_profiles_mutant_is_caught_on_its_own_stream_with_a_readable_shrunk_report(
        name, profile, index):
    """As the mix's search above, on the trace of the profile's own stream that reaches the
    mutant (its share of the mix is past the search's indices); the released class agrees on
    that trace."""
    from kvfuzz.strategies.kvmanager import streams

    if not TARGETS["kvmanager"].catalogue.resolve(name).available():
        pytest.skip("needs vllm installed (see docs/upstream-vllm.md)")
    trace = streams.ALONE[profile].generate(0, index)
    found = divergence("kvmanager", trace, name)
    assert found is not None, name
    assert divergence("kvmanager", trace, "vllm.kvmanager") is None
    assert_caught_with_a_shrunk_report("kvmanager", name, EXPECTED[name], "vllm.kvmanager",
                                       found=found)


# Profiles since 2026-12-04 that also run a mutant's configuration: EAGLE beside a window
# with a group flagged apart (index 13 of seed 0) and multi-token prediction with EAGLE
ALSO = {"eagle_margin_dropped": ("eagle groups", "mtp")}


@pytest.mark.slow
@pytest.mark.parametrize("name, profile", [("eagle_margin_dropped", "eagle window"),
                                           ("cross_sized_by_decoder", "cross attention"),
                                           ("deferred_free_reversed", "deferred frees"),
                                           ("finished_window_kept", "deferred frees")])
def test_a_configurations_mutant_is_caught_by_its_profile_alone(name, profile):
    """The hybrid coordinator's EAGLE margin runs only with EAGLE beside another group, the
    cross-attention group's static allocation only with such a group: of the first 60 seeded
    traces each mutant diverges on its profile's and agrees on every other (for the margin,
    EAGLE over full attention alone included: the unitary coordinator has none)."""
    from kvfuzz.fuzz.kvmanager.target import KVMANAGER

    impl = KVMANAGER.catalogue.resolve(PREFIX + name)
    if not impl.available():
        pytest.skip("needs vllm installed (see docs/upstream-vllm.md)")
    caught, unitary_eagle = {}, 0
    for index in range(60):
        trace = KVMANAGER.generator.generate(0, index)
        unitary_eagle += trace.eagle and not trace.window
        caught.setdefault(trace.note, []).append(
            divergence("kvmanager", trace, impl) is not None)
    assert any(caught.pop(f"profile {profile}")), caught
    for other in ALSO.get(name, ()):  # newer profiles of the same configuration
        caught.pop(f"profile {other}", None)
    assert not any(map(any, caught.values())) and unitary_eagle, (caught, unitary_eagle)
