"""pytest fixtures that put the fake libnvidia-ml.so.1 under the real pynvml.

In-process: the library is preloaded with RTLD_GLOBAL, so pynvml's
`CDLL("libnvidia-ml.so.1")` finds it by soname, and the fake's clock is driven
by the test. In a subprocess: `fake_env()` puts it on LD_LIBRARY_PATH and the
fake runs on the wall clock.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bubblewatch.model.gpu_models import POWER_READING_INSTANT_S, power_average_s
from fake_nvml.build import SONAME, BuildError, build
from fake_nvml.timeline import Timeline

T0_EPOCH_S = 1_700_000_000.0
ENV_PREFIX = "BUBBLEWATCH_FAKE_NVML_"


@dataclass
class FakeLib:
    """The built fake and its test controls."""

    path: Path
    cdll: ctypes.CDLL

    def set_time(self, epoch_s: float) -> None:
        self.cdll.bwfake_set_time(ctypes.c_double(epoch_s))

    def reset(self) -> None:
        self.cdll.bwfake_reset()

    def calls(self) -> int:
        self.cdll.bwfake_calls.restype = ctypes.c_ulonglong
        return int(self.cdll.bwfake_calls())

    def gpm_too_close(self) -> int:
        self.cdll.bwfake_gpm_too_close.restype = ctypes.c_ulonglong
        return int(self.cdll.bwfake_gpm_too_close())


@dataclass
class FakeNvml:
    """One test's fake driver: a timeline, faults, and a manual clock in timeline seconds."""

    lib: FakeLib
    timeline: Timeline
    timeline_path: Path
    t: float = 0.0
    env: dict[str, str] = field(default_factory=dict)

    def at(self, t_s: float) -> float:
        """Move the fake's clock to timeline time `t_s`; returns it (use it as monotonic now)."""
        self.t = t_s
        self.lib.set_time(T0_EPOCH_S + t_s)
        return t_s

    def wall(self) -> float:
        """The fake's wall clock (epoch seconds), for the sampler's timestamps."""
        return T0_EPOCH_S + self.t


def faults_env(**faults: object) -> dict[str, str]:
    """Environment for fault keywords: no_gpm="all" -> BUBBLEWATCH_FAKE_NVML_NO_GPM=all."""
    return {ENV_PREFIX + k.upper(): str(v) for k, v in faults.items() if v is not None}


def fake_env(lib: FakeLib, timeline_path: Path, **faults: object) -> dict[str, str]:
    """A subprocess environment in which pynvml loads the fake (on the wall clock).

    Unlike the in-process factory, it does not read the timeline's GPU name: a GA100 or
    older timeline passes instant_power_usage="all" for NVML's instant power usage.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(lib.path.parent), env.get("LD_LIBRARY_PATH", "")) if p
    )
    env[ENV_PREFIX + "TIMELINE"] = str(timeline_path)
    env.update(faults_env(**faults))
    return env


# One copy per process: each conftest that re-exports the fixture gets its own session
# fixture instance, and a second copy of the library would not be the one pynvml uses.
_LOADED: list[FakeLib] = []


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> FakeLib:
    """Build the fake once per session and preload it where pynvml will find it."""
    if _LOADED:
        return _LOADED[0]
    try:
        path = build(tmp_path_factory.mktemp("fake_nvml"))
    except BuildError as e:
        pytest.skip(f"cannot build the fake NVML library: {e}")
    cdll = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    resident = ctypes.CDLL(SONAME)
    if not hasattr(resident, "bwfake_set_time"):
        pytest.skip("a real libnvidia-ml.so.1 is already loaded in this process")
    _LOADED.append(FakeLib(path, cdll))
    return _LOADED[0]


@pytest.fixture
def fake_nvml(
    fake_nvml_lib: FakeLib, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., FakeNvml]]:
    """Factory: fake_nvml(timeline, **faults) configures the fake for an in-process test."""

    def make(timeline: Timeline, **faults: object) -> FakeNvml:
        # As NVML does, by the GPU model: an instant power usage reading on GA100 and older.
        if power_average_s(timeline.name) == POWER_READING_INSTANT_S:
            faults.setdefault("instant_power_usage", "all")
        for k in list(os.environ):
            if k.startswith(ENV_PREFIX):
                monkeypatch.delenv(k)
        path = timeline.write(tmp_path / "timeline.bwtl")
        env = {ENV_PREFIX + "TIMELINE": str(path), **faults_env(**faults)}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        fake_nvml_lib.reset()
        fake = FakeNvml(fake_nvml_lib, timeline, path, env=env)
        fake.at(0.0)
        return fake

    yield make
    fake_nvml_lib.reset()
    fake_nvml_lib.set_time(-1.0)
