"""Real components the tests start on 127.0.0.1 and stop by PID (README.md, Layout: tests/)."""
