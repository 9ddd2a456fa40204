"""`kvfuzz mutate`: first-order mutants of an implementation's own source, each run through its
target's seeded check, scored, and reported (docs/mutate.md)."""
