"""The central advisor: its cycle runtime (``runtime.py``) and the app that composes and
serves it (``app.py``)."""
