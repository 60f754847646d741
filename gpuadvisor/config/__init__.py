"""Configuration files → validated, typed, frozen objects; environment overrides (DESIGN §3).

Sits above sources and sinks and below services: parsed once at the edge, then passed down.
"""
