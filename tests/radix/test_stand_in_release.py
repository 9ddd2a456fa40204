"""SGLang 0.5.10 and 0.5.11 for real (slow), with kvfuzz's stand-in for `sgl_kernel`'s
host-transfer kernels (impl/sgl_kernel_stand_in.py), each release first on the path of a process
running `kvfuzz` as a user's does (one a run for every file's commands on it:
tests/radix/release_batch.py) and installed as tests/radix/test_legacy_release.py installs it
(skipped, and said, only where neither the wheel cache nor the registry has it): 0.5.10's
`RadixCache`, whose module did not import without the stand-in ("not supported ... imports
sgl_kernel"), agrees on seeded traces through its old calls, a load-back's insert handed whole
pages; 0.5.11's `UnifiedRadixCache` imports and is one line (no tree core)."""

from __future__ import annotations

from tests.helpers import needs_engine
from tests.radix import release_batch

pytestmark = needs_engine("sglang")  # slow, and the lock's packages it imports


# (declared at import, run once a run per release with every other file's commands on it:
# tests/radix/release_batch.py)
# traces 0 and 1 of seed 0 (trace 2 reaches finding D, the paged allocator's kernel)
RADIX_0_5_10 = release_batch.on("0.5.10", ("diff", "radix", "--impl", "sglang.radix", "--cases",
                                           "2", "--corpus", release_batch.OWN_CORPUS))
UNIFIED_0_5_11 = release_batch.on("0.5.11", ("diff", "unified", "--impl", "sglang.unified.rust",
                                             "--cases", "1", "--corpus", release_batch.OWN_CORPUS))


def test_0_5_10s_radix_cache_imports_with_the_stand_in_and_agrees(tmp_path_factory):
    done, = RADIX_0_5_10.results(tmp_path_factory)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "ran to the last op: 2/2" in text and "finish cached" in text


def test_0_5_11s_unified_cache_imports_and_is_one_line(tmp_path_factory):
    done, = UNIFIED_0_5_11.results(tmp_path_factory)
    text = done.stdout + done.stderr
    assert done.returncode == 2, text[-3000:]
    # (the .python entries read its own nodes since 2026-12-05: test_own_nodes_release.py)
    assert ("not supported: sglang 0.5.11: UnifiedRadixCache has no tree core, Rust or Python"
            in text)
    assert "sgl_kernel" not in text  # it imported
