"""Fixtures for tests of the fake NVML library itself."""

from fake_nvml.fixtures import fake_nvml, fake_nvml_lib

__all__ = ["fake_nvml", "fake_nvml_lib"]
