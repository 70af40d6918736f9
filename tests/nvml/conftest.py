"""The NVML sampler's tests run the real pynvml against the fake library."""

from fake_nvml.fixtures import fake_nvml, fake_nvml_lib

__all__ = ["fake_nvml", "fake_nvml_lib"]
