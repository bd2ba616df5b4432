"""Every flag and argument of every ``ascend-dra`` subcommand says what it is in ``--help``."""

from __future__ import annotations

import argparse

from ascend_dra.cli import build_parser


def undocumented(parser: argparse.ArgumentParser, command: str) -> list[str]:
    found = []
    for action in parser._actions:  # argparse has no public walk of a parser's arguments
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += undocumented(sub, f"{command} {name}")
        elif not action.help and not isinstance(action, argparse._HelpAction):
            found.append(f"{command} {'/'.join(action.option_strings) or action.dest}")
    return found


def test_every_argument_has_help_text():
    # A README trial found `discover -o` with no help text (and so did `profiles -o`, `call ACTION`).
    assert undocumented(build_parser(), "ascend-dra") == []
