"""Command-line interface: the subcommands are registered in `main.COMMANDS`, one module each."""
