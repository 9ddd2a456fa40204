"""An upstream class is driven as the installed release has it: found where an earlier release
kept it, read for what its API lacks (which becomes preconditions, so it gets only the inputs it
can take), or refused in one line that names the release. At the pinned release nothing is read
and nothing changes. A fake engine (`fakeeng`, written into a temporary folder with its
distribution metadata) stands for an earlier release; no real one is needed."""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace

import pytest

from kvfuzz.fuzz.engine.catalogue import Catalogue
from kvfuzz.fuzz.targets import TARGETS
from kvfuzz.impl.registry import UPSTREAM, Implementation, ImplementationError, NotThere, load_first
from kvfuzz.strategies.allocator.profile import NO_PAGE_IDS, NO_SEGMENT, broken
from kvfuzz.strategies.allocator.trace import Finish, Truncate
from kvfuzz.strategies.kvmanager import released


# The earlier layout: one module where the current release has a package of modules.
OLD_POOL = '''
from kvfuzz.impl.allocator.paged_allocator import PagedAllocator


class PagedPool(PagedAllocator):
    """A paged class of an earlier release: no free_page_ids, no free_segment(s)."""

    free_page_ids = free_segment = free_segments = None
'''


@pytest.fixture
def fakeeng(tmp_path, monkeypatch):
    """`fakeeng` 1.0: `fakeeng.mem.allocator` is a module (the earlier layout)."""
    (tmp_path / "fakeeng" / "mem").mkdir(parents=True)
    (tmp_path / "fakeeng" / "__init__.py").write_text("")
    (tmp_path / "fakeeng" / "mem" / "__init__.py").write_text("")
    (tmp_path / "fakeeng" / "mem" / "allocator.py").write_text(OLD_POOL)
    (tmp_path / "fakeeng-1.0.dist-info").mkdir()
    (tmp_path / "fakeeng-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fakeeng\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield
    for name in [name for name in sys.modules if name.split(".")[0] == "fakeeng"]:
        del sys.modules[name]


def _entry(**options) -> Implementation:
    return Implementation("fake.paged", "allocator", "fakeeng.mem.allocator.paged:PagedPool",
                          "a released class", UPSTREAM, requires="fakeeng",
                          earlier=("fakeeng.mem.allocator:PagedPool",), **options)


def test_a_class_is_found_where_an_earlier_release_kept_it(fakeeng):
    assert load_first(_entry().paths, "fakeeng").__name__ == "PagedPool"


def test_what_a_release_does_not_have_is_one_line_naming_the_release(fakeeng):
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0 has no Gone "
                                                   r"in fakeeng\.mem\.allocator$"):
        load_first(("fakeeng.mem.allocator.paged:Gone", "fakeeng.mem.allocator:Gone"), "fakeeng")
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0 has no "
                                                   r"module fakeeng\.mem\.radix$"):
        load_first(("fakeeng.mem.radix:Tree",), "fakeeng")
    with pytest.raises(NotThere, match="^import path 'fakeeng.mem.radix:Tree': cannot import"):
        load_first(("fakeeng.mem.radix:Tree",))  # not a released engine's: the plain error


def test_a_release_whose_module_imports_a_package_not_installed_is_one_line(fakeeng, tmp_path):
    # a compiled package no lock holds (sgl_kernel, which SGLang 0.5.10-0.5.11 import, has a
    # stand-in for its host kernels: test_sgl_kernel_stand_in.py)
    (tmp_path / "fakeeng" / "mem" / "kernels.py").write_text("import fake_kernel_absent\n")
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0: fakeeng\.mem"
                                                   r"\.kernels imports fake_kernel_absent, which "
                                                   r"is not installed"):
        load_first(("fakeeng.mem.kernels:Cache",), "fakeeng")
    with pytest.raises(ImplementationError, match=r"^import path 'fakeeng.mem.kernels:Cache': "
                                                   r"cannot import 'fakeeng.mem.kernels': "
                                                   r"ModuleNotFoundError"):
        load_first(("fakeeng.mem.kernels:Cache",))  # not a released engine's: the plain error


def test_a_class_in_none_of_the_places_its_releases_kept_it_names_each_place(fakeeng):
    # MultiEndedAllocator: allocator/unified_sub_pool.py from 0.5.20, multi_ended_allocator.py
    # in 0.5.15-0.5.19, neither before (impl/compaction UPSTREAM_POOLS)
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0 has no module "
                                                   r"fakeeng\.mem\.allocator\.pool, nor "
                                                   r"fakeeng\.mem\.pool$"):
        load_first(("fakeeng.mem.allocator.pool:Pool", "fakeeng.mem.pool:Pool"), "fakeeng")


def test_an_adapters_own_refusal_of_a_release_is_its_line_unwrapped(fakeeng, tmp_path):
    # an adapter of kvfuzz's that reads the release at import and refuses it (the compaction
    # adapter: no private name it reads) says so in its own line, not inside "cannot import"
    (tmp_path / "fakeeng" / "mem" / "adapter.py").write_text(
        "from kvfuzz.impl.registry import ImplementationError\n"
        "raise ImplementationError('not supported: fakeeng 1.0: Pool has no _flush')\n")
    with pytest.raises(ImplementationError, match=r"^not supported: fakeeng 1\.0: Pool has no "
                                                   r"_flush$"):
        load_first(("fakeeng.mem.adapter:make",), "fakeeng")


def test_an_earlier_releases_class_declares_what_it_lacks_and_gets_only_what_it_has(fakeeng):
    catalogue = TARGETS["allocator"].catalogue
    entry = _entry(preconditions=TARGETS["allocator"].catalogue.resolve(
        "sglang.paged").preconditions)
    impl = Catalogue("allocator", (entry,), catalogue.shape, catalogue.declare).as_installed(entry)
    assert {NO_PAGE_IDS, NO_SEGMENT} <= set(impl.preconditions)
    target = TARGETS["allocator"]
    traces = [target.generator.generate(0, index, [impl]) for index in range(20)]
    assert traces[0].origin.generator.endswith(",no-page-ids,no-segment]")
    hows = {op.how for trace in traces for op in trace.ops if isinstance(op, (Finish, Truncate))}
    assert hows == {"free"}
    today = target.generator.generate(0, 0, [entry])  # the current release's stream
    assert "releases by a call the class does not have: page_ids, segment" in \
        broken(today, impl.preconditions)  # (and the misuse of a free_segment it lacks)
    assert target.check(traces[0], impl).status == "agree"  # ran, on the calls it has


def test_at_the_pinned_release_an_entry_is_taken_as_written():
    for name in ("allocator", "blockpool", "kvmanager", "mamba", "swa"):
        catalogue = TARGETS[name].catalogue
        for entry in catalogue.implementations:
            if entry.kind == UPSTREAM and entry.available():
                assert catalogue.as_installed(entry) is entry  # nothing imported or read


@pytest.mark.slow  # imports transformers
def test_an_earlier_sglangs_config_names_do_not_stop_its_import():
    pytest.importorskip("transformers")
    from transformers import PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from kvfuzz.impl.upstream_env import registrations_tolerated

    class Bert(PretrainedConfig):
        model_type = "bert"

    with pytest.raises(ValueError, match="already used by a Transformers config"):
        CONFIG_MAPPING.register("bert", Bert)
    with registrations_tolerated():
        CONFIG_MAPPING.register("bert", Bert)  # as SGLang 0.5.19 registers qwen3_asr
    with pytest.raises(ValueError, match="already used"):
        CONFIG_MAPPING.register("bert", Bert)


def test_a_release_that_cannot_drive_an_entry_leaves_it_out_of_the_defaults_and_says_why(
        fakeeng):
    target = TARGETS["allocator"]
    gone = replace(_entry(), name="fake.gone", path="fakeeng.mem.allocator.paged:Gone",
                   earlier=("fakeeng.mem.allocator:Gone",))
    catalogue = Catalogue("allocator", (_entry(), gone), target.catalogue.shape,
                          target.catalogue.declare)
    assert [impl.name for impl in catalogue.defaults(upstream=True)] == ["fake.paged"]
    assert catalogue.unsupported() == [
        ("fake.gone", "not supported: fakeeng 1.0 has no Gone in fakeeng.mem.allocator")]
    with pytest.raises(ImplementationError, match="^not supported: fakeeng 1.0 has no Gone"):
        catalogue.resolve("fake.gone")
