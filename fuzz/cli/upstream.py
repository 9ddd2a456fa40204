"""`kvfuzz upstream fetch|where` and `kvfuzz diff --upstream`: the released SGLang and vLLM
(`impl/upstream.lock`) in kvfuzz's own cache folder (`kvfuzz.impl.upstream_cache`), never in
the user's environment, run beside kvfuzz's own implementations."""

from __future__ import annotations

import sys

from kvfuzz.impl import upstream_cache

HELP = ("also run every released SGLang and vLLM class kvfuzz drives (sglang and vllm as pinned "
        "in kvfuzz's upstream.lock; fetched into kvfuzz's cache on first use, never into your "
        "environment; an engine you installed yourself is used as it is)")


def add_parser(commands) -> None:
    upstream = commands.add_parser("upstream", help="the released engines in kvfuzz's cache")
    upstream.add_argument("action", choices=["fetch", "where"],
                          help="fetch: install the pinned releases into the cache (once); "
                               "where: print the cache folder and whether it is there")


def run(args, out=None) -> int:
    out = out or sys.stdout
    if args.action == "where":
        state = "fetched" if upstream_cache.fetched() else "not fetched"
        print(f"{upstream_cache.folder()}  ({state}; KVFUZZ_CACHE moves it)", file=out)
        return 0
    try:
        print(upstream_cache.fetch(lambda line: print(line, file=sys.stderr, flush=True)),
              file=out)
    except upstream_cache.FetchError as error:
        print(f"kvfuzz: error: {error}", file=sys.stderr)
        return 1
    return 0


def ensure(err=None) -> bool:
    """For `--upstream`: the engines importable (installed, or fetched into the cache now);
    when they cannot be, one line says why and kvfuzz's own run goes on. Whether they are."""
    err = err or sys.stderr
    if upstream_cache.installed():
        return True
    try:
        upstream_cache.fetch(lambda line: print(line, file=err, flush=True))
        return True
    except upstream_cache.FetchError as error:
        print(f"kvfuzz: warning: --upstream: {error}; running kvfuzz's own implementations "
              f"only", file=err)
        return False
