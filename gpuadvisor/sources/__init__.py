"""Where data comes from: trace files, GPU probes (NVML, simulated), the scheduler queue
(`squeue --json`, queue files) and Prometheus, turned into model values."""
