"""gpuadvisor: make GPU-cluster queueing waste visible and recommend what to reorder."""

__version__ = "0.1.0"
