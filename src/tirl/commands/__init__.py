"""Subcommands of the tirl CLI, one module each (see ``tirl.cli.COMMANDS``)."""
