"""`tuner kernels`: the kernel tile configs `tuner.autotune` stored, one line each.

Reads only. An empty database, or one with no kernel configs yet, prints what to do, exit 1.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from tuner.cli.common import add_command, add_db_option, format_table
from tuner.settings import Settings
from tuner.text import key_values

HEADER = ("kernel", "key", "dtypes", "platform", "config", "ms", "spread", "tried", "torch / triton", "who, when")


def add_kernels_parser(subparsers: Any) -> None:
    k = add_command(subparsers, "kernels", cmd_kernels,
                    help="list the kernel tile configs tuner.autotune stored: key, platform, config, timing")
    k.add_argument("--platform", metavar="KEY", help="only this platform key (or a prefix of it)")
    k.add_argument("--kernel", metavar="NAME", help="only kernels of this function name; a family of "
                   "Inductor's rows by its prefix: inductor-gemm, inductor-triton, inductor-triton:GRAPH_KEY")
    add_db_option(k)


def cmd_kernels(args: argparse.Namespace, settings: Settings) -> int:
    from tuner.storage import Store, kernel_configs

    with Store.open(settings.db_url, readonly=True) as store:
        found = kernel_configs(store)
    if args.kernel:     # a name, or the prefix of Inductor's "family:detail" names
        found = [k for k in found if k.kernel_name == args.kernel or k.kernel_name.startswith(args.kernel + ":")]
    if args.platform:
        found = [k for k in found if k.platform_key.startswith(args.platform)]
    if not found:
        print("no kernel configs stored" + (" matching those filters" if args.platform or args.kernel else "")
              + "; a kernel decorated with @tuner.autotune stores one at its first launch per key",
              file=sys.stderr)
        return 1
    rows = [HEADER] + [(k.kernel_name, key_values(k.key_args), k.dtypes, k.platform_key[:12], key_values(k.config),
                        f"{k.latency_ms:.4g}" if k.latency_ms else "-", f"{k.spread_ms:.2g}", f"{k.configs_tried}/{k.space_size}",
                        f"{k.torch_version} / {k.triton_version}",
                        f"{k.user}@{k.host}, {k.created_at:%Y-%m-%d %H:%M}" if k.created_at else f"{k.user}@{k.host}")
                       for k in found]
    print(format_table(rows, rule=True))
    return 0
