"""kvfuzz: differential fuzzing and verification for the KV-cache page allocators of LLM serving
engines. The repository's top-level folders install as its subpackages: `kvfuzz.strategies`,
`kvfuzz.oracle`, `kvfuzz.impl`, `kvfuzz.fuzz` and `kvfuzz.bench` (see pyproject.toml)."""

__version__ = "0.1.0"
