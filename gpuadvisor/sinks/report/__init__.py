"""Reports of a simulation: the results JSON, terminal tables, plots and per-job schedules."""
