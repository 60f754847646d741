"""Advice: the recommendations of one advisor cycle (reorder, placement, reclaim-idle) and the
hysteresis that decides when they are sent and withdrawn."""
