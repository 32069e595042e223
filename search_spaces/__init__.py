"""Search spaces: the knobs to explore, as Optuna suggestions and as an allow-list.

Import as `tuner.search_spaces` (the folder `search_spaces/` installs under that name).
"""
from tuner.search_spaces.catalogue import ALLOWED, allowed_knob, known_knobs, param_problem, validate_params
from tuner.search_spaces.knobs import Knob, mode_options
from tuner.search_spaces.space import SearchSpace, load_space
from tuner.search_spaces.spacefile import SpaceFile, read_space_file

__all__ = [
    "ALLOWED",
    "Knob",
    "SearchSpace",
    "SpaceFile",
    "allowed_knob",
    "known_knobs",
    "load_space",
    "mode_options",
    "param_problem",
    "read_space_file",
    "validate_params",
]
