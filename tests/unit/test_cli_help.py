"""Every flag and argument of every ``ascend-dra`` subcommand says what it is in ``--help``."""

from __future__ import annotations

import argparse

from ascend_dra.cli.main import build_parser


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


def test_a_variable_named_almost_like_a_setting_is_called_a_typo_and_nothing_else_is():
    """``PROFILE=fake`` (for PROFILES) was ignored without a word: the default profile ran instead."""
    from ascend_dra.cli.main import misspelled

    args = build_parser().parse_args(["run", "--node-name", "n"])
    environ = dict.fromkeys([
        # what a pod's container has besides our settings (the image, Kubernetes' service links)
        "PATH", "HOME", "HOSTNAME", "LANG", "TERM", "PYTHONPATH", "PYTHON_VERSION", "GPG_KEY",
        "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBERNETES_PORT_443_TCP_ADDR", "POD_NAMESPACE",
        "ASCEND_DRA_WEBHOOK_SERVICE_HOST", "NODE_NAME", "PROFILES", "PROFILE_OPTIONS", "http_proxy", "no_proxy",
        # another program's variable that holds one of our names whole (the downward API's usual
        # MY_NODE_NAME; difflib rates it 0.86 against NODE_NAME): a name of its own, not a typo
        "MY_NODE_NAME", "NODE_NAME_OVERRIDE", "OLD_PROFILES",
        # typos, and a name in the wrong case (a variable's name is case-sensitive)
        "PROFILE", "UNHEALTHY_DEVICE", "LOG_LEVL", "FAKE_DEVICE", "PROFILE_OPTION", "log_level",
    ], "x")
    assert misspelled(args, environ) == tuple(
        f"environment variable {typo} is not a setting of ascend-dra run and is ignored; did you mean {meant}?"
        for typo, meant in [("FAKE_DEVICE", "FAKE_DEVICES"), ("LOG_LEVL", "LOG_LEVEL"), ("PROFILE", "PROFILES"),
                            ("PROFILE_OPTION", "PROFILE_OPTIONS"), ("UNHEALTHY_DEVICE", "UNHEALTHY_DEVICES"),
                            ("log_level", "LOG_LEVEL")])
