"""Reliability: each class of availability failure of issue 12, shown closed against real
processes of the three servers (docs/reliability.md)."""
