"""What-if on a cluster's own history, pure: the record rebuilt as replayable jobs
(``rebuild``), the order that replays the site's own scheduler (``as_run``), how well that
replay reproduces the record and what other policies would have done (``fidelity``), and the
``--output-json`` document that holds it all (``document``; docs/whatif.md)."""
