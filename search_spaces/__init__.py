"""Search spaces: the knobs to explore, as Optuna suggestions and as an allow-list.

Import as `tuner.search_spaces` (the folder `search_spaces/` installs under that name).
"""
from tuner.search_spaces.catalogue import (ALLOWED, TABLES, allowed_knob, device_param_problem, known_knobs, param_problem,
                                          validate_params)
from tuner.search_spaces.knobs import (FUNCTORCH_PREFIX, SPECIAL, Knob, installed_default, installed_has, mode_options,
                                      same_value, torch_version)
from tuner.search_spaces.loader import load_space
from tuner.search_spaces.space import MAX_RECORDED_POINTS, SearchSpace, knob_distribution
from tuner.search_spaces.spacefile import SpaceFile, read_space_file

__all__ = [
    "ALLOWED",
    "FUNCTORCH_PREFIX",
    "Knob",
    "MAX_RECORDED_POINTS",
    "SPECIAL",
    "SearchSpace",
    "SpaceFile",
    "TABLES",
    "allowed_knob",
    "device_param_problem",
    "installed_default",
    "installed_has",
    "knob_distribution",
    "known_knobs",
    "load_space",
    "mode_options",
    "param_problem",
    "read_space_file",
    "same_value",
    "torch_version",
    "validate_params",
]
