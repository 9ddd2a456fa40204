"""What the live guards' tests share (tests/<target>/test_guard.py): a trace's calls made by
kvfuzz's own lock-step driver on an object it reaches only through the guard, and the check
that the guard's verdict on a trace is the batch judge's."""

import pytest

import kvfuzz
from kvfuzz.fuzz.engine import corpus
from kvfuzz.fuzz.engine.target import AGREE, DIVERGE


def guarded_run(target, trace, impl, corpus_dir, check: bool = True,
                settings=lambda kwargs: {}):
    """`trace`'s calls made by the target's batch driver (its judge's lock step) on objects of
    `impl` that come back guarded (or recorded) as they are built; the guard's session.
    `settings(constructor kwargs)` are the guard's own. A Mismatch raised inside a call stops
    the run (the lock step records it as the call's crash: the session holds the report)."""
    cls = impl.load()
    sessions = []

    def guarded(*args, **kwargs):
        live = cls(*args, **kwargs)
        if check:
            wrapped = kvfuzz.guard(live, target.name, impl=impl.name, corpus=corpus_dir,
                                   **settings(kwargs))
        else:
            wrapped = kvfuzz.record(live, target.name, **settings(kwargs))
        sessions.append(wrapped.kvfuzz_session)
        return wrapped

    client = target.judge.lockstep(trace, guarded, **target.judge.options(impl))
    released = impl.kind != "mutant"
    for op in trace.ops:
        _, problems = client.step(op)
        if sessions[0].divergence is not None:
            break
        # Without a divergence the client sees what it would see bare (a GuardUnsupported
        # would show here as the call's crash).
        assert not problems or not released, problems
        assert "GuardUnsupported" not in repr(problems), problems
    return sessions[0]


def assert_guard_verdicts_are_the_batch_judges(target, released, mutants, corpus_dir,
                                               traces: int = 40, settings=lambda kwargs: {},
                                               modelled=lambda trace: trace, generate=None):
    """On each mutant's first `traces` seeded traces (`generate(index, mutant)`; by default the
    target's, what the mutant declares), as far as the guard models their calls
    (`modelled(trace)`, None where it cannot), the guard diverges exactly where the batch judge
    does, and its file (the calls up to the bad one) fails on the mutant the same way and runs
    clean on the released class; the mutants caught."""
    generate = generate or (lambda index, impl: target.generator.generate(0, index, [impl]))
    caught = set()
    for mutant in mutants:
        for index in range(traces):
            trace = modelled(generate(index, mutant))
            if trace is None:
                continue
            batch = target.check(trace, mutant)
            found = guarded_run(target, trace, mutant, corpus_dir, settings=settings).divergence
            assert (batch.status == DIVERGE) == (found is not None), (
                mutant.name, index, batch.status, found and found.report())
            if found is None:
                continue
            caught.add(mutant.name)
            assert found.saved_path and found.step == len(found.input.ops) - 1
            _, saved = corpus.load(found.saved_path)
            again = target.check(saved, mutant).divergence
            # The same divergence, or one earlier: a class that keeps the caller's tensor shows
            # it in a replay at once (the harness overwrites its tensors after the call) and
            # live only when the engine's own reuse of the tensor reaches the next call.
            assert again is not None and (again.signature == found.signature or
                                          again.step < found.step), found.report()
            assert target.check(saved, released).status == AGREE
            assert "replay    kvfuzz replay " in found.report()
            break
    return caught


def assert_released_runs_guarded_and_its_record_replays(target, released, corpus_dir,
                                                        traces: int, settings=lambda kw: {},
                                                        modelled=lambda trace: trace):
    for index in range(traces):
        trace = modelled(target.generator.generate(0, index, [released]))
        if trace is None:
            continue
        guarded = guarded_run(target, trace, released, corpus_dir, settings=settings)
        assert guarded.divergence is None
        recorded = guarded_run(target, trace, released, corpus_dir, check=False,
                               settings=settings)
        assert recorded.lock is None and recorded.trace() == guarded.trace()
        assert target.check(recorded.trace(), released).status == AGREE
    assert not list(corpus_dir.iterdir())  # nothing diverged: nothing saved


def assert_mutant_raises_in_sessions(session, name: str, released: str, seeds: int):
    """`session(seed)` (a scheduler session over mutant `name`, guarded) raises Mismatch in one
    of `seeds` sessions, and its file fails the same way on the mutant, clean on `released`."""
    for seed in range(seeds):
        try:
            session(seed)
        except kvfuzz.Mismatch as raised:
            found = raised.divergence
            break
    else:
        raise AssertionError(f"{name}: no divergence in {seeds} sessions")
    assert found.impl == name
    result = kvfuzz.replay(found.saved_path, found.impl)
    assert [d.signature for d in result.divergences] == [found.signature]
    assert kvfuzz.replay(found.saved_path, released).ok


def families(prefixes: dict[str, str], ours: str):
    """One pytest param per released class in `prefixes` (name -> its mutants' name prefix):
    kvfuzz's own class `ours` in every tier, the engine's only where SGLang is installed."""
    from tests.helpers import needs_engine

    return [pytest.param(name, marks=[] if name == ours else needs_engine("sglang"), id=name)
            for name in prefixes]


def assert_every_mutant_of_the_family_caught(target, released: str, prefix: str, corpus_dir,
                                             unguarded: dict[str, str] | None = None):
    """The guard catches every mutant whose name starts with `prefix`, with the batch judge's
    verdict, on the traces the released class `released` supports; but those in `unguarded`
    (name -> why a guard cannot see that fault), each of which must exist and have a reason."""
    unguarded = unguarded or {}
    names = {m.name for m in target.catalogue.implementations}
    assert all(name in names and len(why) > 20 for name, why in unguarded.items()), unguarded
    mutants = [m for m in target.catalogue.implementations
               if m.kind == "mutant" and m.name.startswith(prefix) and m.name not in unguarded]
    caught = assert_guard_verdicts_are_the_batch_judges(
        target, target.catalogue.resolve(released), mutants, corpus_dir)
    assert mutants and caught == {m.name for m in mutants}
