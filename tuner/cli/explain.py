"""`tuner explain MODEL`: per graph, which stored config `backend="tuner"` would apply.

It captures the model file's graphs exactly as `tuner search` does (same inputs, grad off;
with `--mode train`, a training step's graphs through get_loss, grad on; with `--shapes`, those
of each bucket, named `stem[batch=8]` as the search names them; Dynamo's warnings hidden unless --debug)
and asks the same `tuner.lookup.Lookup` the backend uses, without warnings: for each graph
it prints the tier that hit, or why none did and the nearest stored keys. A database that
cannot be read is an error (exit 1) naming the fix; a miss is not (exit 0).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from tuner.cli.common import add_command, add_db_option, add_shapes_option, bucket_sizes, dynamo_warnings_hidden
from tuner.settings import Settings


def add_explain_parser(subparsers: Any) -> None:
    """Add `explain` to the CLI's subcommands (called from `tuner.cli.build_parser`)."""
    p = add_command(subparsers, "explain", cmd_explain,
                    help="show which stored config each graph of a model file would get, and why")
    p.add_argument("model", help="Python file defining get_model() and get_inputs()")
    add_db_option(p)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads of the program to explain (part of a CPU platform; default: torch's)")
    add_shapes_option(p)
    p.add_argument("--mode", default="inference", choices=("inference", "train"),
                   help="explain the graphs of the forward pass (default) or of a training step (as tuned "
                        "by tuner search --mode train)")


def cmd_explain(args: argparse.Namespace, settings: Settings) -> int:
    import torch

    from tuner.lookup import Lookup, explain_graph, format_explanation, short
    from tuner.platform import current_platform
    from tuner.workload import TRAIN, capture_workload, load_model_file, loss_call, workload_name

    if args.threads:
        torch.set_num_threads(args.threads)
    lookup = Lookup(settings, warn=False)
    store = lookup.store()          # StorageError here: the CLI prints `error: ...` and exits 1
    for shape in bucket_sizes(args.shapes):
        loaded = load_model_file(args.model, shape=shape)
        training = args.mode == TRAIN     # a training step's graphs (grad on) have their own keys
        name = workload_name(args.model, shape)
        with dynamo_warnings_hidden(args, settings):   # graph breaks say nothing about the lookup
            workload = capture_workload(loaded, name=name, grad=training,
                                        call=loss_call(loaded) if training else None)
        platform = current_platform(loaded.device)
        print(f"{workload.name}: {len(workload.graphs)} graph(s), workload {short(workload.key)}, "
              f"on {platform.describe()} [platform {short(platform.key)}]; database {store.safe_url}")
        for graph in workload.graphs:
            print(format_explanation(explain_graph(lookup, graph, platform, workload_name=workload.name)))
    if lookup.unusable is not None:
        print(f"error: {lookup.unusable}", file=sys.stderr)
        return 1
    return 0
