"""Command-line interface. Each submodule with a `register(subparsers)` is a subcommand."""
