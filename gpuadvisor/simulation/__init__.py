"""Discrete-event simulation of queue orders and placements on job traces."""
