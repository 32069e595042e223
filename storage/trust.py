"""What a stored row may hold to be applied on its platform: the one check of untrusted rows.

A shared database or an exchange file may come from anyone with write access, so every row is
checked against what its own platform can apply, twice: when a file is imported or a database
merged (`tuner.storage.exchange_records`: a row that fails refuses the whole file) and when lookup
reads it at compile time (`tuner.lookup`: the row is skipped with one warning, the graph gets
Inductor's defaults). Plain Python over the frozen records; no database, no torch at import.

- **Knobs** against the table of the platform's own device (`tuner.search_spaces.TABLES`, plus
  `precision` where `tuner.precision` runs on that device), never the union: a CUDA-only knob or
  value is refused on a CPU platform. Values against that knob's type, range and choices;
  `cpp.gemm_thread_factors` must multiply to the platform's thread count. A knob the table marks
  unsafe needs the row's `unsafe` flag (its search ran with `--unsafe`).
- **Runtime knobs** (`BestConfig.runtime`): a mapping whose every item is a runtime knob of the
  registry with one of its fixed values that applies on the platform's device
  (`tuner.runtime.runtime_problem`): a CUDA allocator option is refused on a CPU platform, and an
  allocator is a name, never a path or free text.
- **Evidence**: finite; `1/MAX_SPEEDUP <= ci_low <= speedup <= ci_high <= MAX_SPEEDUP` (no real
  confirmation measures a config 100x faster or slower than Inductor's defaults); rounds in
  [1, MAX_ROUNDS]; latencies above zero and below MAX_LATENCY_MS; `stability` None or a share in
  [0, 1]. Without the cap a row with `ci_low=1e300` would win every "keep the better" comparison
  forever.
- **Kernel configs** (`kernel_configs` rows): Inductor's Triton tile configs (`inductor-triton:`)
  hold only the block-size keys Inductor uses, each a power of two within Inductor's maxima
  (`TRITON_MAX_BLOCK`, restated), plus `num_warps` (a power of two up to 32) and `num_stages` (1
  to 8), all plain ints; a GEMM choice (`inductor-gemm:`) names its winner as text and times each
  choice; every kernel row's latency is above zero (an unreported Triton timing, 0, excepted).
- **Strings** (every text field, knob values and kernel entries included): no C0 or C1 control
  character, so a stored string can never move a terminal's cursor, write its clipboard or end a
  line of a report (`control_problem`).

Each check returns one line naming the problem, or None; callers word it for their user.
"""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Mapping

from tuner.jsoncheck import show

if TYPE_CHECKING:
    from tuner.keys import Platform
    from tuner.storage.records import BestConfig, FailureRule, KernelConfig

MAX_SPEEDUP = 100.0                     # no confirmed config is 100x off Inductor's defaults
MAX_ROUNDS = 100_000                    # confirmation rounds behind one interval
MAX_LATENCY_MS = 3_600_000.0            # an hour per call: beyond any model tuner measures
MIN_KERNEL_MS = 1e-4                    # 100 ns: below any kernel launch
MAX_RUNTIME_TEXT = 64                   # characters of a runtime knob's name or value (the registry's are short)
# Inductor's largest block per prefix (torch._inductor.runtime.hints.TRITON_MAX_BLOCK in torch 2.13;
# X is 8192 on ROCm, 4096 on CUDA; R0_ and R1_ include multi-kernel's factor 16).
TRITON_MAX_BLOCK = {"XBLOCK": 8192, "YBLOCK": 1024, "ZBLOCK": 1024, "R0_BLOCK": 4096 * 16,
                    "R1_BLOCK": 2048 * 16}
MAX_WARPS = 32
STAGES = (1, 8)
TRITON_PREFIX = "inductor-triton:"      # tuner.inductor.triton_choices.KERNEL_PREFIX
GEMM_PREFIX = "inductor-gemm:"          # tuner.inductor.gemm_choices.KERNEL_PREFIX
GEMM_WINNER, GEMM_TIMING = "choice", "ms:"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_MULTILINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")   # a graph's code keeps its newlines
_BEST_TEXT = ("graph_key", "platform_key", "workload_key", "user", "host", "tuner_version", "torch_version",
              "triton_version", "source", "origin")
_KERNEL_TEXT = ("kernel_key", "kernel_name", "platform_key", "dtypes", "user", "host", "tuner_version",
                "torch_version", "triton_version", "source")


def control_problem(text: Any, where: str, *, multiline: bool = False) -> str | None:
    """Why `text` may not be stored or shown (not a string, or a C0/C1 control character:
    U+0000-U+001F, U+007F-U+009F; `multiline` allows the newline), or None."""
    if not isinstance(text, str):
        return f"{where} is a {type(text).__name__}, not text"
    found = (_CONTROL_MULTILINE if multiline else _CONTROL).search(text)
    if found is None:
        return None
    return f"{where} contains the control character U+{ord(found.group()):04X} at position {found.start()}"


def holds_unsafe(params: Any, device: str | None = None) -> bool:
    """Whether `params` set a knob that the `device` table (None: any table) marks unsafe."""
    from tuner.search_spaces import TABLES

    tables = TABLES.values() if device is None else (TABLES.get(device, ()),)
    names = {k.name for table in tables for k in table if k.unsafe}
    return isinstance(params, Mapping) and any(name in names for name in params)


def params_problem(params: Any, platform: "Platform", *, unsafe: bool, where: str = "params") -> str | None:
    """Why knob `params` cannot apply on `platform` (see the module docstring), or None."""
    from tuner.search_spaces import device_param_problem

    if not isinstance(params, Mapping):
        return f"{where} is a {type(params).__name__}, not a mapping of knob names to values"
    for name, value in params.items():
        problem = control_problem(name, f"{where}: a knob name")
        if problem is None and isinstance(value, str):
            problem = control_problem(value, f"{where}: {name}")
        if problem is None and not (value is None or isinstance(value, (bool, int, float, str))):
            problem = f"{where}: {name} has a {type(value).__name__} value; knob values are single JSON scalars"
        if problem is None:
            problem = device_param_problem(name, value, platform.device)
        if problem is None and name == "cpp.gemm_thread_factors" and isinstance(value, str):
            problem = _thread_factor_problem(value, platform)
        if problem is not None:
            return problem if problem.startswith(where) else f"{where}: {problem}"
    if not unsafe and holds_unsafe(params, platform.device):
        return (f"{where} set a knob that changes numerics, but the row does not record a search run "
                f"with --unsafe")
    return None


def _thread_factor_problem(value: str, platform: "Platform") -> str | None:
    threads = dict(platform.hardware).get("threads", "")
    factors = [int(f) for f in value.split(",") if f.isdigit()]
    if not threads.isdigit() or len(factors) != 3 or math.prod(factors) == int(threads):
        return None
    return f"cpp.gemm_thread_factors {value!r} multiply to {math.prod(factors)}, not this platform's {threads} threads"


def evidence_problem(best: "BestConfig") -> str | None:
    """Why the evidence of `best` cannot be true (see the module docstring), or None."""
    numbers = {name: getattr(best, name) for name in ("speedup", "ci_low", "ci_high", "latency_ms", "baseline_ms",
                                                      "unfrozen_speedup", "search_speedup")}
    for name, value in numbers.items():
        if value is None and name not in ("speedup", "ci_low", "ci_high"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{name} is {value!r}, not a finite number"
    low, speedup, high = numbers["ci_low"], numbers["speedup"], numbers["ci_high"]
    if not 1 / MAX_SPEEDUP <= low <= speedup <= high <= MAX_SPEEDUP:
        return (f"evidence must have {1 / MAX_SPEEDUP:g} <= ci_low <= speedup <= ci_high <= {MAX_SPEEDUP:g}, "
                f"got ci_low {low!r}, speedup {speedup!r}, ci_high {high!r}")
    for name in ("unfrozen_speedup", "search_speedup"):
        if numbers[name] is not None and not 1 / MAX_SPEEDUP <= numbers[name] <= MAX_SPEEDUP:
            return f"{name} {numbers[name]!r} is outside [{1 / MAX_SPEEDUP:g}, {MAX_SPEEDUP:g}]"
    for name in ("latency_ms", "baseline_ms"):
        if numbers[name] is not None and not 0 < numbers[name] <= MAX_LATENCY_MS:
            return f"{name} {numbers[name]!r} is outside (0, {MAX_LATENCY_MS:g}]"
    if type(best.rounds) is not int or not 1 <= best.rounds <= MAX_ROUNDS:
        return f"rounds {best.rounds!r} is outside [1, {MAX_ROUNDS}]"
    stability = best.stability
    if stability is not None:
        if isinstance(stability, bool) or not isinstance(stability, (int, float)) or not math.isfinite(stability):
            return f"stability is {show(stability)}, not a finite number"
        if not 0 <= stability <= 1:
            return f"stability {stability!r} is outside [0, 1] (a share of resamples)"
    return None


def runtime_knobs_problem(runtime: Any, platform: "Platform") -> str | None:
    """Why runtime knobs `runtime` cannot apply on `platform` (see the module docstring), or None."""
    from tuner.runtime import runtime_problem

    if not isinstance(runtime, Mapping):
        return f"runtime is a {type(runtime).__name__}, not a mapping of runtime knob names to values"
    for name, value in runtime.items():
        for text in (name, value):
            if isinstance(text, str) and len(text) > MAX_RUNTIME_TEXT:
                return f"runtime: {show(text)} is not a runtime knob or value (over {MAX_RUNTIME_TEXT} characters)"
        problem = runtime_problem(name, value, platform.device)
        if problem is not None:
            return f"runtime: {problem}"
    return None


def best_problem(best: "BestConfig", platform: "Platform") -> str | None:
    """Why stored best config `best` cannot apply on `platform` (the platform it was stored for):
    its text, evidence, knobs, verdict and runtime knobs; None when it can."""
    for name in _BEST_TEXT:
        problem = control_problem(getattr(best, name), name)
        if problem is not None:
            return problem
    problem = evidence_problem(best)
    if problem is not None:
        return problem
    if not all(isinstance(getattr(best, name), bool) for name in ("is_default", "eager", "unfrozen_eager", "unsafe")):
        return "is_default, eager, unfrozen_eager and unsafe must be true or false"
    problem = params_problem(best.params, platform, unsafe=best.unsafe)
    if problem is None and best.unfrozen_params is not None:
        problem = params_problem(best.unfrozen_params, platform, unsafe=best.unsafe, where="unfrozen_params")
    if problem is None and (best.is_default or best.eager) and best.params:
        problem = "a defaults-won or eager row must have empty params"
    return problem or runtime_knobs_problem(best.runtime, platform)


def rule_problem(rule: "FailureRule", platform: "Platform") -> str | None:
    """Why learned failure `rule` does not name knob values of `platform`'s device table, or None.
    (Unsafe knobs are fine here: a rule only ever makes a search skip candidates.)"""
    problem = control_problem(rule.platform_key, "platform_key")
    return problem or params_problem(dict(rule.knobs), platform, unsafe=True, where="knobs")


def kernel_problem(kernel: "KernelConfig") -> str | None:
    """Why kernel config `kernel` cannot be launched as stored (see the module docstring), or None."""
    for name in _KERNEL_TEXT:
        problem = control_problem(getattr(kernel, name), name)
        if problem is not None:
            return problem
    for what, entries in (("key_args", kernel.key_args), ("config", kernel.config)):
        for name, value in entries:
            problem = control_problem(name, f"{what} key") or (
                control_problem(value, f"{what} {name}") if isinstance(value, str) else None)
            if problem is not None:
                return problem
    latency = kernel.latency_ms
    if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not math.isfinite(latency) or not (
            MIN_KERNEL_MS <= latency <= MAX_LATENCY_MS or (latency == 0 and kernel.kernel_name.startswith(TRITON_PREFIX))):
        return f"latency_ms {latency!r} is outside [{MIN_KERNEL_MS:g}, {MAX_LATENCY_MS:g}]"
    spread = kernel.spread_ms
    if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not 0 <= spread <= MAX_LATENCY_MS:
        return f"spread_ms {spread!r} is outside [0, {MAX_LATENCY_MS:g}]"
    if kernel.kernel_name.startswith(TRITON_PREFIX):
        return triton_config_problem(dict(kernel.config))
    if kernel.kernel_name.startswith(GEMM_PREFIX):
        return _gemm_problem(dict(kernel.config))
    return launch_problem(dict(kernel.config))


def triton_config_problem(config: Mapping[str, Any]) -> str | None:
    """Why an Inductor Triton tile config cannot go into `autotune_lookup_table`, or None."""
    for name, value in config.items():
        if type(value) is not int:
            return f"config {name} is {value!r}, not a plain int"
        if name in TRITON_MAX_BLOCK:
            if not (_power_of_two(value) and value <= TRITON_MAX_BLOCK[name]):
                return f"config {name} {value} is not a power of two up to {TRITON_MAX_BLOCK[name]}"
        elif name not in ("num_warps", "num_stages"):
            return f"config key {name!r} is not one Inductor tunes ({', '.join(TRITON_MAX_BLOCK)}, num_warps, num_stages)"
    if "num_warps" not in config or "num_stages" not in config:
        return "config lacks num_warps or num_stages"
    return launch_problem(config)


def launch_problem(config: Mapping[str, Any]) -> str | None:
    """Why `num_warps` or `num_stages` in a kernel config cannot be a Triton launch, or None
    (either may be absent from a `tuner.autotune` config)."""
    warps, stages = config.get("num_warps", 1), config.get("num_stages", STAGES[0])
    if type(warps) is not int or not (_power_of_two(warps) and warps <= MAX_WARPS):
        return f"num_warps {warps!r} is not a power of two up to {MAX_WARPS}"
    if type(stages) is not int or not STAGES[0] <= stages <= STAGES[1]:
        return f"num_stages {stages!r} is outside [{STAGES[0]}, {STAGES[1]}]"
    return None


def _gemm_problem(config: Mapping[str, Any]) -> str | None:
    if not isinstance(config.get(GEMM_WINNER), str):
        return f"a GEMM choice names its winner as text under {GEMM_WINNER!r}"
    for name, value in config.items():
        if name == GEMM_WINNER:
            continue
        if not name.startswith(GEMM_TIMING) or isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0 <= value <= MAX_LATENCY_MS:
            return f"config {name!r}={value!r} is not a choice's timing in ms"
    return None


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0
