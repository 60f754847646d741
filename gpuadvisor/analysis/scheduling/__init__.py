"""One scheduling pass as a unit: plans, queue orders, the pass with its scan over buckets of
pending jobs (they see each other through ``protocols``), reservations, and placement with its
context (end-fit among the policies). Free capacity (with its node-state index) and
fragmentation are measured in ``analysis.capacity``, ``analysis.node_states`` and
``analysis.fragmentation``, which import nothing from here."""
