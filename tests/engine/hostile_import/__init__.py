"""Implementation modules that misbehave when imported (`tests/engine/test_import_time.py`): one
module each, as import-time code runs once per process. Each exports a correct `alloc_extend`
(or, for `chdir`, a broken one), so what they do at import is the only thing to judge."""
