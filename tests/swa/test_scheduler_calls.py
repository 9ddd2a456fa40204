"""What a scheduler asks an SWA allocator beyond allocating and releasing, each check shown to
catch a test double that only it catches: the prefix cache asked for each pool's shortfall (and
a cache that shares no prefix never asked), a preallocation's shortfall read again after the
eviction, a resize, a KV offload, and the read-only API the scheduler, its budgets and its
invariant checker read (sizes, the translation through the KV pool with "no prefix" kept, the
capacity views, the debug line)."""

import pytest
import torch

from kvfuzz.fuzz.swa.lockstep import SWALockstep
from kvfuzz.impl.swa.scheduler_api import EvictParams
from kvfuzz.impl.swa.swa_allocator import SWAAllocator
from kvfuzz.strategies.swa.scheduler_ops import Cache, Offload, Reclaim, Resize
from kvfuzz.strategies.swa.trace import Admit, Decode, Evict, Extend, Trace
from tests.helpers import divergence, double


# --- test doubles: kvfuzz's class with one defect each ----------------------------------------
class AsksTheLargerShortfall(SWAAllocator):
    """Asks the prefix cache for the larger shortfall in both pools."""

    def evict_to_free_tokens(self, tree_cache, num_tokens):
        if tree_cache is None or not tree_cache.supports_prefix_sharing():
            return
        short = max(0, num_tokens - min(self.full_available_size(), self.swa_available_size()))
        if short:
            tree_cache.evict_for_alloc(EvictParams(num_tokens=short, swa_num_tokens=short))


class AsksACacheThatSharesNothing(SWAAllocator):
    """Asks a cache even when it shares no prefix (a chunk cache)."""

    def evict_to_free_tokens(self, tree_cache, num_tokens):
        if tree_cache is None:
            return
        full = max(0, num_tokens - self.full_available_size())
        swa = max(0, num_tokens - self.swa_available_size())
        if full or swa:
            tree_cache.evict_for_alloc(EvictParams(num_tokens=full, swa_num_tokens=swa))


class ReclaimReadsOnce(SWAAllocator):
    """Reports the shortfall it saw before the eviction, not after."""

    def reclaim_for_prealloc(self, tree_cache, full_tokens, swa_tokens):
        available = self.swa_available_size()
        if available < swa_tokens:
            tree_cache.evict_for_alloc(EvictParams(swa_num_tokens=swa_tokens - available))
            return f"SWA eviction insufficient: needed={swa_tokens}, available={available}"
        return None


class ResizeKeepsTheSWAPool(SWAAllocator):
    def resize(self, config):
        swa = self.swa_attn_allocator
        kept = (swa.size, swa.num_pages)
        super().resize(config)
        swa.size, swa.num_pages = kept
        swa.clear()


class OffloadNeverLoads(SWAAllocator):
    def load_cpu_copy(self, kv_cache_cpu, indices, mamba_indices=None, req_pool_index=None):
        return None


class WithTheReadAPI(SWAAllocator):
    """kvfuzz's class with upstream's read-only calls, as upstream answers them."""

    def translate_swa_indices_for_transfer(self, kv_indices):
        return self._kvcache.translate_loc_from_full_to_swa(kv_indices)

    def swa_capacity_and_available(self, *, full_capacity, swa_capacity):
        return ((full_capacity, self.full_available_size()),
                (swa_capacity, self.swa_available_size()))

    def debug_print(self) -> str:
        return (f"#swa-available-size: {self.swa_available_size()}, "
                f"#full-attn-available-size: {self.full_available_size()}, ")


class NoPrefixTranslatesToZero(WithTheReadAPI):
    def translate_swa_indices_for_transfer(self, kv_indices):
        return self._kvcache.translate_loc_from_full_to_swa(kv_indices).clamp(min=0)


class CapacityViewsSwapped(WithTheReadAPI):
    def swa_capacity_and_available(self, *, full_capacity, swa_capacity):
        return ((full_capacity, self.swa_available_size()),
                (swa_capacity, self.full_available_size()))


class DebugLineNamesOnePool(WithTheReadAPI):
    def debug_print(self) -> str:
        return f"#swa-available-size: {self.swa_available_size()}, "


class SizeOfTheFullPool(SWAAllocator):
    @property
    def size(self):
        return self._size_full


def caught(trace, name: str):
    found = divergence("swa", trace, double("swa", f"{__name__}:{name}"))
    assert found is not None, name
    return found


# --- traces -----------------------------------------------------------------------------------
def cached_requests(*ops, P: int = 4, size: int = 32, size_swa: int = 24):
    """Two requests finished into the prefix cache (the first with its window moved), a third
    running, then `ops`."""
    grow = (Admit(1), Extend((1,), (2 * P + 1,)), Evict(1, 1), Cache(1), Admit(2),
            Extend((2,), (P,)), Cache(2), Admit(3), Extend((3,), (P - 1,)))
    return Trace(P, size, size_swa, False, grow + ops)


@pytest.mark.parametrize("delta", [-1, 0, 1, 4, 9])
@pytest.mark.parametrize("pool", ["full", "swa"])
def test_a_reclaim_asks_the_cache_for_each_pools_shortfall(pool, delta):
    trace = cached_requests(Reclaim(delta, pool), Decode())
    assert divergence("swa", trace, "swa.torch") is None
    lock = SWALockstep(trace, SWAAllocator)
    assert all(lock.step(op)[1] == [] for op in trace.ops)


def test_asking_both_pools_for_the_larger_shortfall_is_caught():
    trace = cached_requests(Reclaim(4, "swa"), size_swa=32)  # short 12 full, 4 SWA tokens
    found = caught(trace, "AsksTheLargerShortfall")
    assert found.signature[3] == "prefix cache asked", found.report()


def test_a_cache_that_shares_no_prefix_is_never_asked():
    trace = cached_requests(Reclaim(4, "swa", tree="chunk"))
    assert divergence("swa", trace, "swa.torch") is None
    found = caught(trace, "AsksACacheThatSharesNothing")
    assert found.signature[3] == "prefix cache asked", found.report()


def test_a_preallocations_shortfall_is_read_again_after_the_eviction():
    # 12 SWA tokens free; asking 16 evicts the first cached request's window, which is enough.
    trace = cached_requests(Reclaim(4, prealloc=True))
    lock = SWALockstep(trace, SWAAllocator)
    assert all(lock.step(op)[1] == [] for op in trace.ops)
    assert lock.events["reclaim evicted"] == 1 and lock.events["reclaim short"] == 0
    found = caught(trace, "ReclaimReadsOnce")
    assert found.signature[3] == "None vs success", found.report()


def test_a_resize_rebuilds_both_pools_at_their_new_sizes():
    trace = Trace(4, 32, 32, False, (Resize(16, 8), Admit(1), Extend((1,), (9,))))
    assert divergence("swa", trace, "swa.torch") is None
    found = caught(trace, "ResizeKeepsTheSWAPool")
    assert "swa_available_size" in found.report(), found.report()


def test_an_offload_hands_the_kv_pool_its_own_copy_back():
    trace = Trace(4, 32, 32, False, (Admit(1), Extend((1,), (5,)), Offload(1)))
    assert divergence("swa", trace, "swa.torch") is None
    found = caught(trace, "OffloadNeverLoads")
    assert found.signature[3] == "result", found.report()


@pytest.mark.parametrize("name, shows", [
    ("NoPrefixTranslatesToZero", "translated"),
    ("CapacityViewsSwapped", "capacity"),
    ("DebugLineNamesOnePool", "debug_print"),
    ("SizeOfTheFullPool", "size: expected 24"),
])
def test_the_read_api_is_what_the_scheduler_relies_on(name, shows):
    trace = cached_requests(Reclaim(0, "full"))
    assert divergence("swa", trace, double("swa", f"{__name__}:WithTheReadAPI")) is None
    found = caught(trace, name)
    assert found.signature[3] == "api" and shows in found.report(), found.report()


def test_the_read_api_reads_what_the_class_has():
    from kvfuzz.impl.swa.api_reads import api_reads
    from kvfuzz.impl.swa.kvcache import stand_in_kvcache

    kvcache = stand_in_kvcache()
    reads = api_reads(WithTheReadAPI(16, 8, 4, torch.float16, "cpu", kvcache, False), kvcache,
                      [])
    assert reads == {"need_sort": False, "size": 8, "size_full": 16, "size_swa": 8,
                     "translated": [-1], "capacity": [[1001, 16], [1002, 8]],
                     "debug_print": "#swa-available-size: 8, #full-attn-available-size: 16, "}


def test_the_cache_answers_an_earlier_releases_chunk_cache_question():
    # SGLang before 0.5.22 asks `tree_cache.is_chunk_cache()` where later releases ask
    # `supports_prefix_sharing()`: the cache the driver hands over answers both, consistently
    # (without it every 0.5.21 trace that reclaims crashed in the allocator's call).
    from kvfuzz.impl.swa.prefix_cache import PrefixCache

    for sharing in (True, False):
        cache = PrefixCache(lambda method, slots: None, sharing=sharing)
        assert cache.is_chunk_cache() is (not cache.supports_prefix_sharing()) is (not sharing)
