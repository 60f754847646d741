"""Prometheus's HTTP API: the shared edge (``client``, ``answers``, ``gc_pause``,
``byte_budget``), the advisor's live read (``live/``) and whatif's history read
(``history/``)."""
