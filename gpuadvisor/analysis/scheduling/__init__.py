"""One scheduling pass as a unit: plans, queue orders, the pass with its scan over buckets of
pending jobs, reservations and placement (end-fit among them)."""
