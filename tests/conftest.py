"""Fixtures shared by every test module: the fake libnvidia-ml (built once per session)."""

from tests.fake_nvml.fixtures import fake_nvml, fake_nvml_library

__all__ = ["fake_nvml", "fake_nvml_library"]
