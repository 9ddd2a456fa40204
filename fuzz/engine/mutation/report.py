"""The mutation report: counts by status, the score, a table per file and per function, every
survivor with its edit and a command that runs it alone; JSON for CI."""

from __future__ import annotations

from collections import Counter, defaultdict

# Statuses, in report order. A timeout or a crash is what `kvfuzz diff` reports as the
# implementation's divergence, so they count as kills.
KILLS = ("killed", "timeout", "crashed")
STATUSES = (*KILLS, "survived", "not reached", "equivalent", "cosmetic", "incompetent", "error",
            "not run")


def score(counts: Counter) -> float | None:
    """Killed over killed and survived: reached, non-equivalent, competent mutants only."""
    killed = sum(counts[s] for s in KILLS)
    scored = killed + counts["survived"]
    return killed / scored if scored else None


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _tests_lines(report: dict) -> list[str]:
    """The kill matrix against the user's own tests (--also-run), and what only they kill."""
    asked = [r for r in report["records"] if "tests" in r]
    if not asked:
        return []
    cells = report["matrix"]
    killed = sum(r["tests"] == "killed" for r in asked)
    out = [f"--also-run ({asked[0].get('tests_command', '')}): the tests kill {killed} of "
           f"{len(asked)} ({percent(killed / len(asked))})",
           "  kill matrix: " + " · ".join(f"{k} {v}" for k, v in cells.items())]
    gaps = [r for r in asked if r["tests"] == "killed" and r["status"] not in KILLS]
    wrong = [r for r in gaps if r["status"] == "equivalent"]
    gaps = [r for r in gaps if r["status"] != "equivalent"]
    if gaps:
        out.append(f"killed by the tests, not by kvfuzz ({len(gaps)}):")
        out += [f"  {r['id']} {r['function']} ({r['status']})" for r in gaps]
    if wrong:  # the declaration's reason must say why the tests' check is outside the contract
        out.append(f"declared equivalent, killed by the tests ({len(wrong)}):")
        out += [f"  {r['id']} {r['function']}" for r in wrong]
    return out


def summary(records: list, meta: dict) -> dict:
    counts = Counter(r["status"] for r in records)
    by_function = defaultdict(Counter)
    by_file = defaultdict(Counter)
    for r in records:
        by_function[r["function"]][r["status"]] += 1
        by_file[r["module"]][r["status"]] += 1
    from kvfuzz.fuzz.engine.mutation.also_run import matrix

    fresh = [r for r in records if r.get("fresh")]
    return {**meta, "counts": {s: counts[s] for s in STATUSES}, "score": score(counts),
            "fresh": {"rerun": len(fresh), "killed": sum(r["status"] in KILLS for r in fresh)},
            "matrix": matrix(records),
            "files": {k: {"counts": dict(v), "score": score(v)} for k, v in by_file.items()},
            "functions": {k: {"counts": dict(v), "score": score(v)}
                          for k, v in sorted(by_function.items())},
            "records": records}


def lines(report: dict, command: str) -> list[str]:
    """The report as text; `command` runs one mutant alone with `{id}` filled in."""
    counts = report["counts"]
    out = [f"kvfuzz mutate {report['target']}: {report['impl']}, {report['run']} of "
           f"{report['mutants']} mutants, {report['cases']} cases each (seed {report['seed']}"
           + (f", profile {report['profile']!r} alone" if report.get("profile") else "") + ")",
           "  " + " · ".join(f"{s} {counts[s]}" for s in STATUSES if counts[s]),
           f"  score {percent(report['score'])} (killed, timed out or crashed, of those and "
           f"the survivors)"]
    fresh = report["fresh"]
    if fresh["rerun"]:
        out.append(f"  rerun fresh {fresh['rerun']} (survived a forked child without running "
                   f"their lines: a set-up done before the fork?), {fresh['killed']} killed "
                   f"there; the fresh verdict counts")
    out += _table("file", report["files"]) + _table("function", report["functions"])
    survivors = [r for r in report["records"] if r["status"] == "survived"]
    if survivors:
        out.append(f"survivors ({len(survivors)}):")
        for r in survivors:
            out += [f"  {r['module']}:{r['line']} {r['function']} {r['operator']}",
                    f"    - {r.get('before', '')}", f"    + {r.get('after', '')}",
                    f"    {command.format(id=r['id'])}"]
            if r.get("ran") is False:
                out.append("    its lines never ran once it was in place" + (
                    ", in a fresh process either" if r.get("fresh") else ""))
    unreached = Counter(r["function"] for r in report["records"] if r["status"] == "not reached")
    if unreached:
        out.append("not reached (no seeded case runs these lines; reach gaps, not strength):")
        out += [f"  {name}: {n}" for name, n in sorted(unreached.items())]
    out += _tests_lines(report)
    odd = [r for r in report["records"] if r["status"] in ("incompetent", "error")]
    for r in odd[:20]:
        out.append(f"{r['status']}: {r['id']}: {r.get('what', '')}")
    return out


def _table(label: str, rows: dict) -> list[str]:
    if len(rows) < 2 and label == "file":
        return []
    width = max([len(label)] + [len(k) for k in rows]) + 1
    head = f"  {label:<{width}} {'mutants':>7} {'killed':>6} {'surv.':>5} {'unreached':>9} " \
           f"{'equiv.':>6} {'score':>6}"
    out = [head]
    for name, row in rows.items():
        c = Counter(row["counts"])
        out.append(f"  {name:<{width}} {sum(c.values()):>7} {sum(c[s] for s in KILLS):>6} "
                   f"{c['survived']:>5} {c['not reached']:>9} {c['equivalent']:>6} "
                   f"{percent(row['score']):>6}")
    return out
