"""Where data comes from: trace files and the synthetic workloads' calibration data."""
