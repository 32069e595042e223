"""Search spaces: the knobs to explore, as Optuna suggestions and as an allow-list.

Import as `tuner.search_spaces` (the folder `search_spaces/` installs under that name). The face
exports what other packages use, and `known_knobs`, which the docs and error messages name for
users; the space-file parser (`spacefile`) and the single-knob checks stay inside.
"""
from tuner.search_spaces.catalogue import ALLOWED, TABLES, device_param_problem, known_knobs, validate_params
from tuner.search_spaces.knobs import (FUNCTORCH_PREFIX, SPECIAL, Knob, installed_default, installed_has, mode_options,
                                      same_value, torch_version)
from tuner.search_spaces.loader import load_space
from tuner.search_spaces.space import MAX_RECORDED_POINTS, SearchSpace, knob_distribution

__all__ = [
    "ALLOWED",
    "FUNCTORCH_PREFIX",
    "Knob",
    "MAX_RECORDED_POINTS",
    "SPECIAL",
    "SearchSpace",
    "TABLES",
    "device_param_problem",
    "installed_default",
    "installed_has",
    "knob_distribution",
    "known_knobs",
    "load_space",
    "mode_options",
    "same_value",
    "torch_version",
    "validate_params",
]
