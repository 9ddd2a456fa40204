"""The environment switches of SGLang's checks an SWA allocator runs under: the pools' debug
checks (read when they are built) and the invariant checks' level (read at every check), by
name. Standard library only: the live guard reads them too."""

DEBUG_ENV = "SGLANG_DEBUG_MEMORY_POOL"
INVARIANT_ENV, STRICT = "SGLANG_INVARIANT_CHECK", "2"  # InvariantCheckLevel.STRICT
