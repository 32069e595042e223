"""The model side: the user's model file, its Dynamo graphs and their fingerprints.

`load_model_file` loads `get_model()`/`get_inputs()` (every mistake a one-line
`ModelFileError`) and `eager_reference` refuses an output that could not tell a right compile
from a wrong one; `capture_workload` captures the Dynamo graphs and keys them
(`fingerprint_graph`, the lookup's own key); shape buckets are `get_inputs(batch=...)` variants of
one file; the training contract (`get_loss`, `get_optimizer`) is one step of it; graph features
(call-target counts) compare two workloads. Imports only the ground floor; torch loads inside the
functions that need it.

Over 20 names: six packages (inductor, measure, lookup, search, report, cli) use five parts of
one model here (loading, capture, shape buckets, the training step, graph features), and each
name is imported by at least one of them. What only tests use (`GraphFingerprint`, `LoadedModel`,
`StepResult`) they import from `tuner.keys` or the inner modules.
"""
from tuner.workload.capture import Workload, capture_workload, fingerprint_graph
from tuner.workload.graph_features import call_counts, cosine
from tuner.workload.modelfile import eager_reference, flatten_outputs, load_model_file
from tuner.workload.shapes import (Bucket, ShapeBuckets, closest, nearest, parse_shapes, shape_label, size_distance,
                                   weighted, workload_name)
from tuner.workload.training import (TRAIN, check_mode, check_training, compare_steps, loss_call, make_optimizer,
                                     run_step, timed_step)

__all__ = [
    "TRAIN",
    "Bucket",
    "ShapeBuckets",
    "Workload",
    "call_counts",
    "capture_workload",
    "check_mode",
    "check_training",
    "closest",
    "compare_steps",
    "cosine",
    "eager_reference",
    "fingerprint_graph",
    "flatten_outputs",
    "load_model_file",
    "loss_call",
    "make_optimizer",
    "nearest",
    "parse_shapes",
    "run_step",
    "shape_label",
    "size_distance",
    "timed_step",
    "weighted",
    "workload_name",
]
