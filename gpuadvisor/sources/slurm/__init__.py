"""Slurm: running `squeue --json`, parsing its output (22.05 to 26.05) and Slurm hostlists."""
