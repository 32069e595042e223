"""Import torchvision, and what imports it (timm, transformers), beside a CPU-only torch.

PyPI's Linux torchvision wheels are CUDA builds: beside torch's CPU build their C++ ops
(nms, roi_align and the other detection ops) cannot load, and then `import torchvision`
fails while it registers fake kernels for `torchvision::nms` and `torchvision::qnms`, the
two it registers whether or not its ops loaded. timm imports torchvision, and so does
`transformers` whenever torchvision is installed, so all three fail. The models used here
call none of those ops: when the library does not load, `allow_import` declares those two
schemas (no kernels: calling them raises) and the imports go through. When the ops load (a
CPU torchvision build, or a CUDA torch), or torchvision is not installed, it does nothing.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_SCHEMAS = ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
            "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_declared: list = []     # the Library must stay alive: its definitions go with it


def allow_import() -> None:
    """Make `import torchvision` work if it is installed; call before importing timm or transformers."""
    import torch

    if "torchvision" in sys.modules or _declared:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    try:
        torch.ops.load_library(str(Path(spec.submodule_search_locations[0]) / "_C.so"))
    except OSError:
        library = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS:
            library.define(schema)
        _declared.append(library)


def torchvision() -> ModuleType:
    """The torchvision module; raises ImportError when it is not installed."""
    allow_import()
    import torchvision as module

    return module
