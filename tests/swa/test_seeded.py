"""The bundled SWA allocator agrees with the oracle on 2,000 seeded traces, and the first 60
reach every edge class the lock step counts: allocations short on one pool only, window
evictions and releases inside free groups, the group protocol misused. Each trace is judged once:
the first 60 (the quick tier's test) with their edge classes counted, the other 1,940 (`slow`) in
4 shards (`tests.helpers.seeded_tests`), of which CI runs the first (`tests/bars.py`)."""

from tests.helpers import seeded_tests

(test_it_agrees_on_2000_seeded_traces,
 test_the_first_seeded_traces_agree_and_reach_every_edge_class) = seeded_tests(
    "swa", "swa.torch", reach=60)
