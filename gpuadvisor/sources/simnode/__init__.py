"""A simulated GPU node for `gpuadvisor agent --backend=sim`: a deterministic node from a spec, or
one node of a simulator run's schedule. Not the simulator (that is `gpuadvisor.simulation`)."""
