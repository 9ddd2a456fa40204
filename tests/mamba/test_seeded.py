"""The bundled Mamba slot allocator agrees with the oracle on 2,000 seeded traces, and the first
40 reach every edge class the lock step counts, the group-protocol misuse included. Each trace is
judged once: the first 40 (the quick tier's test) with their edge classes counted, the other
1,960 (`slow`) in 4 shards (`tests.helpers.seeded_tests`), of which CI runs the first
(`tests/bars.py`)."""

from tests.helpers import seeded_tests

(test_it_agrees_on_2000_seeded_traces,
 test_the_first_seeded_traces_agree_and_reach_every_edge_class) = seeded_tests(
    "mamba", "mamba.torch", reach=40)
