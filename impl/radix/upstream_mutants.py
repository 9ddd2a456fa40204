"""Broken variants of the released SGLang `RadixCache` (sglang 0.5.23): the installed module's
source with ONE edit inside one method each (`impl/source_mutation.py`), built on first use. Each
breaks a promise the scheduler relies on, at least one per property the lock step checks, several
after SGLang's own history (issue numbers in `why`). They need sglang installed; the tests that
run them skip without it."""

from __future__ import annotations

from kvfuzz.impl.source_mutation import Mutation, mutant_classes

MODULE, CLASS = "sglang.srt.mem_cache.radix_cache", "RadixCache"
KEY = "RadixKey"

MUTATIONS = {
    # match length and device indices
    "limit_matches_last_token": Mutation(
        f"{KEY}._raw_len", "return self.limit", "return self.limit + 1",
        "a key's limit lets one more token through: admission matches the prompt's last token"),
    "path_out_of_order": Mutation(
        f"{CLASS}.path_device_indices", "values.reverse()", "pass",
        "the matched slots come deepest node first"),
    "short_key_walks": Mutation(
        f"{CLASS}.match_prefix", "if len(key) == 0:", "if False:",
        "a key shorter than a page walks the tree with an empty key (#10637)"),
    # evictable and protected sizes
    "unlock_counts_shared_twice": Mutation(
        f"{CLASS}.dec_lock_ref", "if node.lock_ref == 1:", "if node.lock_ref >= 1:",
        "releasing a node two requests lock counts it evictable already (#35270's symptom)"),
    "unlock_keeps_protected": Mutation(
        f"{CLASS}.dec_lock_ref", "self.protected_size_ -= len(node.key)", "pass",
        "a release leaves its nodes in protected_size(): tokens counted as locked twice over, "
        "the evictable side right"),
    # edges keyed by the child's first page
    "split_child_stale_key": Mutation(
        f"{CLASS}._split_node", "{key[split_len:].child_key(self.page_size): child}",
        "{key.child_key(self.page_size): child}",
        "a split files the lower child under its old first page (#36696)"),
    # lock counts monotone, back to baseline
    "lock_leaf_twice": Mutation(
        f"{CLASS}.inc_lock_ref", "node.lock_ref += 1", "node.lock_ref += 1 + (not node.children)",
        "locking takes two references on a leaf, one on each node above"),
    # a locked node is never evicted
    "locked_leaf_evictable": Mutation(
        f"{CLASS}._update_leaf_status", "node.lock_ref > 0:", "node.lock_ref > 1:",
        "a leaf locked by one request counts as evictable (mini-sglang #52's symptom)"),
    # eviction: at least the shortfall, in policy order
    "evict_stops_short": Mutation(
        f"{CLASS}.evict", "while num_evicted < num_tokens and",
        "while num_evicted + 1 < num_tokens and",
        "eviction stops a token short of what was asked"),
    "parent_keeps_child_priority": Mutation(
        f"{CLASS}.evict", "(new_priority, x.parent)", "(_priority, x.parent)",
        "a parent left childless joins the eviction heap with its child's priority"),
    "split_drops_hit_count": Mutation(
        f"{CLASS}._split_node", "new_node.hit_count = child.hit_count", "new_node.hit_count = 0",
        "a split's upper node starts with no hits (#18843)"),
    "match_keeps_access_time": Mutation(
        f"{CLASS}._match_prefix_helper", "child.last_access_time = access_time", "pass",
        "a match leaves the nodes it walks as old as they were: LRU evicts hot prefixes"),
    # no tree value aliases a caller tensor or another node
    "insert_keeps_caller_value": Mutation(
        f"{CLASS}._insert_helper", "new_node.value = value.clone()", "new_node.value = value",
        "a new leaf keeps a view of the caller's value tensor (#17400)"),
    "insert_keeps_partial_page": Mutation(
        f"{CLASS}.insert", "value = value[: len(key)]", "value = value",
        "a load-back's value is not cut to the page-aligned key: the new leaf keeps the partial "
        "page's slots, which the caller frees"),
    "prompt_split_by_identity": Mutation(
        f"{CLASS}._insert_cache", "if 0 < len(prompt_key) < key_len:",
        "if 0 < len(prompt_key) is not key_len:",
        "a checkpoint compares the prompt's and the key's lengths by identity: past 256 tokens a "
        "prompt that is the whole key is inserted again, raising its path's priority"),
    # no slot twice in the tree
    "split_child_takes_upper_slots": Mutation(
        f"{CLASS}._split_node", "child.value = child.value[split_len:]",
        "child.value = child.value[:len(child.value) - split_len]",
        "a split's lower node keeps the first slots (the upper node's) instead of its own"),
    # no slot both in the tree and on the free list
    "checkpoint_frees_inserted": Mutation(
        f"{CLASS}._insert_cache", "kv_indices[req.kv.cache_protected_len : result.prefix_len]",
        "kv_indices[req.kv.cache_protected_len : key_len]",
        "a checkpoint frees the slots it just gave the tree, not only the duplicates"),
    # available + evictable + protected + held = capacity
    "evict_leaks_slots": Mutation(
        f"{CLASS}.evict", "self.token_to_kv_pool_allocator.free_segment(x.value, start_pos=0)",
        "pass", "eviction drops nodes without freeing their slots"),
    # KV events: stored minus removed is what is cached
    "split_removes_child_blocks": Mutation(
        f"{CLASS}._split_node", "        return new_node",
        "        self.kv_events.record_remove(child)\n        return new_node",
        "a split announces the lower child's blocks removed (#14934)"),
}


__getattr__ = mutant_classes(MODULE, CLASS, MUTATIONS, "sglang_radix")
