"""What an implementation hands back cannot fool or break the judge: an exception whose message
cannot be read is reported (as "its message could not be read"), never a crash of the harness;
a tensor subclass whose `tolist()` lies is read for what it holds."""

from __future__ import annotations

from kvfuzz.fuzz.engine.target import DIVERGE
from kvfuzz.fuzz.targets import TARGETS
from tests.helpers import double, kvfuzz_here

HOSTILE = "tests.engine.hostile"


def _first_divergence(target: str, path: str, inputs: int = 40):
    owner, impl = TARGETS[target], double(target, path)
    for index in range(inputs):
        outcome = owner.check(owner.generator.generate(0, index), impl)
        if outcome.status == DIVERGE:
            return outcome.divergence
    raise AssertionError(f"{path}: no divergence in {inputs} inputs")


def test_an_unreadable_exception_of_a_function_is_its_divergence():
    found = _first_divergence("extend", f"{HOSTILE}:raises_unprintable")
    assert found.what == "raised" and "(its message could not be read)" in found.report()


def test_an_unreadable_exception_of_a_class_is_its_crash():
    found = _first_divergence("mamba", f"{HOSTILE}:MambaUnprintable")
    assert "Unprintable: (its message could not be read)" in found.report(), found.report()


def test_a_tensor_whose_tolist_lies_is_read_for_what_it_holds():
    found = _first_divergence("mamba", f"{HOSTILE}:MambaLies")
    assert "actual [0:] [1001, 1002" in found.report(), found.report()  # not what tolist said


def test_int32_slots_are_not_int64_ones():
    found = _first_divergence("mamba", f"{HOSTILE}:MambaInt32")
    assert "torch.int32 tensor" in found.report() and "expected a 1-D int64" in found.report()


def test_the_command_reports_it_with_no_traceback(tmp_path):
    ran = kvfuzz_here("diff", "mamba", "--impl", f"{HOSTILE}:MambaUnprintable", "--cases", 5,
                      "--corpus", tmp_path)
    assert ran.returncode == 1, ran.stderr
    assert "(its message could not be read)" in ran.stderr and "Traceback" not in ran.stderr
    assert len(list(tmp_path.iterdir())) == 1
