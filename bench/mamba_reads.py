"""Which Mamba state block vLLM's worker reads at each step of one request, on a seeded "mamba
align" or "mamba connector" trace run against the released manager (docs/upstream-vllm.md,
"The state a step reads"):

    python -m kvfuzz.bench.mamba_reads PROFILE INDEX RID

After each op that touches the request, one line: the op, its computed tokens, the scheduler's
Mamba table, the worker's copy of it (`oracle/kvmanager/mamba_align.py`: the scheduler's table
when the request is new to the worker, new blocks appended after that), and for a step the
column and block the worker copies the state from (`preprocess_mamba`) and the column it writes,
with the block's reference count and the other requests holding it at that point ("free" where
its count is 0: back in the pool, another request's to take). Needs vLLM (`kvfuzz upstream
fetch`)."""

from __future__ import annotations

import argparse


def walk(profile: str, index: int, rid: int) -> list[str]:
    """The lines described above, for request `rid` of `profile`'s trace `index` of seed 0."""
    from kvfuzz.fuzz.kvmanager import align
    from kvfuzz.fuzz.targets import TARGETS
    from kvfuzz.oracle.kvmanager import mamba_align
    from kvfuzz.strategies.kvmanager import streams

    lines: list[str] = []
    state = align.AlignLockstep.state

    def traced(lock, op):
        stepped = lock.stepped == rid
        before = dict(lock.worker_state)  # the column each request's last step wrote
        problems = state(lock, op)
        if getattr(op, "rid", None) != rid or rid not in lock.requests:
            return problems
        request, size = lock.requests[rid], lock.trace.block_size
        table = lock.mamba_rows.get(rid, [])
        line = (f"{type(op).__name__.lower():9} {request.status:8} computed "
                f"{request.computed:3}  mamba {table}  worker {lock.worker_rows.get(rid, '-')}")
        if stepped and request.status == "running":
            read, written = mamba_align.worker_columns(lock.read_from[rid], request.computed,
                                                       size, before.get(rid))
            row = lock.worker_rows[rid]
            block = row[read] if read is not None else None
            refs = lock.read("ref_counts")
            holders = sorted(other for other, rows in lock.mamba_rows.items()
                             if other != rid and block and block in rows)
            held = "-" if not block else \
                f"ref {refs[block]}{' FREE' if refs[block] == 0 else ''}" + \
                (", also " + ", ".join(f"r{other}" for other in holders) if holders else "")
            line += (f"  | step {lock.read_from[rid]}->{request.computed}: reads column {read} "
                     f"(block {block}, {held}), writes column {written}")
        lines.append(line)
        return problems

    target = TARGETS["kvmanager"]
    align.AlignLockstep.state = traced
    try:
        outcome = target.check(streams.ALONE[profile].generate(0, index),
                               target.catalogue.resolve("vllm.kvmanager"))
    finally:
        align.AlignLockstep.state = state
    lines.append(f"verdict: {outcome.divergence.what if outcome.divergence else 'agrees'}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("index", type=int)
    parser.add_argument("rid", type=int)
    args = parser.parse_args(argv)
    print("\n".join(walk(args.profile, args.index, args.rid)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
