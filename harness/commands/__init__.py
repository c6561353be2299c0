"""One module per top-level subcommand.

Each module defines ``add_parser(subparsers)`` (argument definitions only; no heavy
imports) and the argparse default ``func`` it sets is a ``run(args) -> int`` callable
that tests can call without a subprocess.
"""

COMMAND_MODULES = (
    "harness.commands.data",
    "harness.commands.qem",
    "harness.commands.run",
    "harness.commands.history",
    "harness.commands.render",
    "harness.commands.compare",
    "harness.commands.calibrate",
    "harness.commands.recheck",
    "harness.commands.native",
)
