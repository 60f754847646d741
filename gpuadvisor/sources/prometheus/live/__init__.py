"""The advisor's live read of Prometheus: the profiles' queries at one instant, and the
``LiveState`` built from their answers (``state.py``)."""
