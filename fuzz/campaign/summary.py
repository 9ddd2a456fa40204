"""The end-of-campaign summary of `kvfuzz fuzz`: throughput, corpus, edge classes, and one line
per distinct failure signature with where its minimised case was saved and how to replay it."""

from __future__ import annotations



def edge_coverage(spec, features) -> tuple[int, int, list[str]]:
    """Edge classes hit (the target's "edge:" features), of how many, and those never hit."""
    target = getattr(spec, "target", None)
    classes = [n for n in target.judge.feature_names() if n.startswith("edge:")] if target else []
    missing = [name.removeprefix("edge:") for name in classes if not features.get(name)]
    return len(classes) - len(missing), len(classes), missing


def summary(campaign, elapsed: float) -> str:
    stats = campaign.stats()
    name = campaign.target.name
    impls = ", ".join(campaign.impl_specs or campaign.target.default_impls())
    corpus_size = sum(1 for p in campaign.dirs["bytes"].iterdir() if not p.name.startswith("."))
    lines = [f"summary: kvfuzz fuzz {name}"
             + ("  (interrupted: everything found so far is saved)" if campaign.interrupted
                else ""),
             f"  implementations  {impls if campaign.target.takes_impl else '-'}",
             f"  wall time        {elapsed:.0f} s, {campaign.jobs} worker(s)",
             f"  executions       {stats['execs']:,} "
             f"({stats['execs'] / max(elapsed, 1e-9):,.0f}/s)",
             f"  byte corpus      {corpus_size} inputs in {campaign.dirs['bytes']}"]
    hit, total, missing = edge_coverage(campaign.target, stats["features"])
    if total:
        lines.append(f"  edge classes     {hit}/{total} hit"
                     + (f"; never hit: {', '.join(missing)}" if missing else ""))
    failures = stats["failures"]
    lines.append(f"  failing inputs   {sum(failures.values()):,}, {len(failures)} signature(s); "
                 f"{len(campaign.findings)} new, saved once each:")
    for signature, (finding, saved) in campaign.findings.items():
        lines += [f"    {signature}  x{failures.get(signature, 1):,}",
                  f"      {finding.headline}",
                  f"      saved   {saved}  ({finding.note})",
                  f"      replay  {finding.replay(saved)}"]
    for entry in campaign.preexisting:
        lines.append(f"    already in the corpus: {entry}")
    if campaign.ended_by_input:
        lines.append(f"  workers ended    {campaign.ended_by_input} by the input they were "
                     f"checking (exit, crash or --timeout); each input re-run and triaged above")
    if campaign.blind_crashes:
        lines.append(f"  WORKER CRASHES THAT SAVED NOTHING: {campaign.blind_crashes} "
                     f"(a harness bug: see {campaign.dirs['logs']})")
    return "\n".join(lines)
