"""Subcommands of the ``framebus`` CLI (see framebus.cli.COMMANDS)."""
