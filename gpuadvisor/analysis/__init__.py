"""Pure analysis: capacity, fragmentation, placement, queue orders, idle-time accounting, advice."""
