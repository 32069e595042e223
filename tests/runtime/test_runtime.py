"""Runtime knobs (`tuner.runtime`): names resolve to the system's own libraries, settings become the
environment a process starts with or what a running one sets, and a timing process's allocator state
does not depend on what it ran before."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tuner.errors import SpaceError, TunerError
from tuner.runtime import ALLOCATOR, KNOBS, OMP_WAIT_POLICY, RuntimeConfig, choices_here, runtime_problem
from tuner.runtime import allocators
from tuner.settings import PROCESS_VARIABLES, Settings


def test_every_variable_a_knob_sets_is_one_settings_reads():
    names = {name for knob in KNOBS.values() for value in knob.values.values() for name, _ in value.env}
    assert names | {"LD_PRELOAD"} <= set(PROCESS_VARIABLES)
    assert dict(Settings.from_env({"OMP_WAIT_POLICY": "PASSIVE", "HOME": "/x"}).process_env) == {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize("value", ["/tmp/evil.so", "libjemalloc.so.2", "../jemalloc", "JEMALLOC", 1, None])
def test_a_row_names_an_allocator_from_the_list_never_a_path(value):
    assert runtime_problem(ALLOCATOR, value) is not None
    with pytest.raises(SpaceError, match="not one of"):
        RuntimeConfig.from_dict({ALLOCATOR: value})


def test_device_checks():
    assert runtime_problem(ALLOCATOR, "jemalloc", "cpu") is None
    assert "cpu platforms" in runtime_problem(ALLOCATOR, "jemalloc", "cuda")
    assert "cuda platforms" in runtime_problem("runtime.cuda_alloc_conf", "expandable-segments", "cpu")
    assert runtime_problem("runtime.nope", "default", "cpu") is not None
    with pytest.raises(SpaceError, match="mapping"):
        RuntimeConfig.from_dict(["runtime.allocator"])


def test_runtime_knobs_are_not_compile_knobs():
    from tuner.search_spaces import validate_params

    with pytest.raises(SpaceError, match="unknown knob"):
        validate_params({ALLOCATOR: "jemalloc"})


def test_library_lookup_is_confined_to_the_system_folders(tmp_path):
    assert allocators.library("no-such-allocator") is None
    assert allocators.library("../../tmp/jemalloc") is None
    planted = tmp_path / "libjemalloc.so.2"
    planted.write_bytes(b"\x7fELF")
    planted.chmod(0o666)
    assert not allocators._trusted(planted)          # anyone may write it
    found = allocators.library("jemalloc")
    if found is not None:                            # scripts/test.sh installs libjemalloc2
        assert str(found).startswith(("/usr/lib", "/lib")) and allocators._trusted(found)


def test_start_env_preloads_the_system_library_first():
    if not allocators.available("jemalloc"):
        pytest.skip("libjemalloc2 is not installed (scripts/test.sh installs it)")
    config = RuntimeConfig.from_dict({ALLOCATOR: "jemalloc", OMP_WAIT_POLICY: "passive"})
    env = config.start_env({"LD_PRELOAD": "/opt/mine.so", "PATH": "/bin"})
    assert env["LD_PRELOAD"].split() == [str(allocators.library("jemalloc")), "/opt/mine.so"]
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["PATH"] == "/bin"
    assert config.start_only() == [(ALLOCATOR, "jemalloc"), (OMP_WAIT_POLICY, "passive")]
    retain = RuntimeConfig.from_dict({ALLOCATOR: "glibc-retain"})
    assert retain.start_env({})["MALLOC_TRIM_THRESHOLD_"] == str(1 << 30)
    assert retain.start_env({}, in_process=True) == {}       # our processes set it with mallopt


def test_an_allocator_not_installed_is_left_out_and_refused(monkeypatch):
    monkeypatch.setattr(allocators, "library", lambda name: None)
    settings, notes = choices_here("cpu")
    assert (ALLOCATOR, "jemalloc") not in settings and any("jemalloc is not installed" in n for n in notes)
    with pytest.raises(TunerError, match="jemalloc is not installed here"):
        RuntimeConfig.from_dict({ALLOCATOR: "jemalloc"}).start_env({})


def test_apply_running_sets_what_it_can_and_names_the_rest():
    retain = RuntimeConfig.from_dict({ALLOCATOR: "glibc-retain"})
    assert retain.apply_running({}) == []
    passive = RuntimeConfig.from_dict({OMP_WAIT_POLICY: "passive"})
    assert passive.apply_running({"OMP_WAIT_POLICY": "PASSIVE"}) == []
    (line,) = passive.apply_running({})
    assert "OMP_WAIT_POLICY=PASSIVE must be set when the process starts" in line


# A 4 MiB block, allocated in a fresh process or after a 4 MiB block was freed: served by mmap (glibc's
# mallinfo2 counts the mapped blocks) or from the heap, which glibc's dynamic threshold allows once a big
# block was freed, and pinning allows always.
_PROBE = textwrap.dedent("""
    import ctypes, sys
    import torch
    from tuner.runtime import RuntimeConfig
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = Info
    if sys.argv[1] == "pinned":
        RuntimeConfig().pin_for_timing()
    if sys.argv[2] == "after-a-free":
        before = torch.empty(4 << 20, dtype=torch.uint8)     # mmapped at glibc's starting threshold
        del before                                            # its free moves the dynamic threshold
    mapped = libc.mallinfo2().hblks
    again = torch.empty(4 << 20, dtype=torch.uint8)
    print(libc.mallinfo2().hblks - mapped)
""")


@pytest.mark.skipif(allocators.glibc() is None, reason="glibc's malloc only")
def test_a_timing_process_allocates_the_same_whatever_it_freed_before():
    """`pin_for_timing`: what ran before (eager references, other variants) cannot move the state a
    timed call runs in. As glibc comes, a block is mmapped in a fresh process and served from the heap
    once a big block was freed; pinned, it is served from the heap either way."""
    def mapped(mode: str, history: str) -> int:
        out = subprocess.run([sys.executable, "-c", _PROBE, mode, history], capture_output=True, text=True,
                             check=True, env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")})
        return int(out.stdout.strip())

    assert (mapped("dynamic", "fresh"), mapped("dynamic", "after-a-free")) == (1, 0)     # moved by history
    assert (mapped("pinned", "fresh"), mapped("pinned", "after-a-free")) == (0, 0)       # the same state
