"""The bundled SWA allocator agrees with the oracle on 2,000 seeded traces (`slow`), and the
traces reach every edge class the lock step counts: allocations short on one pool only, window
evictions and releases inside free groups, the group protocol misused."""

from tests.helpers import seeded_tests

test_it_agrees_on_2000_seeded_traces, test_seeded_traces_reach_every_edge_class = \
    seeded_tests("swa", "swa.torch", reach=60)
