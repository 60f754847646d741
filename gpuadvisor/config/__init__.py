"""Configuration files → validated, typed, frozen objects; environment overrides
(docs/architecture.md, `config/`).

Sits above sources and sinks and below services: parsed once at the edge, then passed down.
"""
