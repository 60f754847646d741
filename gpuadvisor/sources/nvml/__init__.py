"""NVML through nvidia-ml-py: the probe, one choke point for every call, GPM metrics and the XID
event thread."""
