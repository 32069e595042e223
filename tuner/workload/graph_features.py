"""Graph features for finding the nearest stored workloads: call-target counts and cosine similarity.

A leaf module (standard library only). The features of a workload are how many times each
call target appears in its graphs' canonical text (`GraphFingerprint.code`, one node per
line: `%3 = call_function torch.nn.functional.relu(%2) :: ...`), keyed by the node's op and
its target (`call_function torch.nn.functional.relu`, `call_module torch.nn.modules.linear.Linear`,
`call_method view`). Module configuration, shapes and dtypes are left out: two models built
from the same operators in similar proportions are near, whatever their sizes. Similarity is
the cosine of two count vectors: 1.0 for the same proportions, 0.0 for no target in common.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable

_CALL = re.compile(r"^%?\d+\s+(?:=\s+)?(call_function|call_method|call_module)\s+([^\s(]+)")


def call_counts(codes: Iterable[str]) -> Counter[str]:
    """How often each call target appears in these graphs' canonical text ("op target" -> count)."""
    counts: Counter[str] = Counter()
    for code in codes:
        for line in code.splitlines():
            found = _CALL.match(line.strip())
            if found is not None:
                counts[f"{found.group(1)} {found.group(2)}"] += 1
    return counts


def cosine(a: Counter[str], b: Counter[str]) -> float:
    """The cosine similarity of two count vectors, in [0, 1]; 0.0 when either is empty."""
    dot = sum(count * b[key] for key, count in a.items() if key in b)
    norms = math.sqrt(sum(c * c for c in a.values())) * math.sqrt(sum(c * c for c in b.values()))
    return dot / norms if norms else 0.0
