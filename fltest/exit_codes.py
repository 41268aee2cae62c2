"""The exit codes of FLTest's commands, in one place: ``fltest``, ``fltest-deploy``, ``fltest-flower`` and the node tools.

Each member carries its meaning, which the documentation's exit code reference prints.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """An exit code and what it means (``.meaning``)."""

    meaning: str

    def __new__(cls, value: int, meaning: str) -> ExitCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    OK = 0, "done: every run completed (or was recorded as unsupported by its framework)"
    FAILED = 1, "a failure: a run failed, or the cluster, compose or Docker did (one line names it)"
    BAD_INPUT = 2, "bad input: a config, file, setting or option refused in one line; nothing was started or written"
    NODE_REFUSED = (
        78,
        (
            "a Ray node refused to start (EX_CONFIG): no token authentication or no usable token file; "
            "a restart cannot cure it (`deploy.node.ray_start --refused-exit-code` changes it)"
        ),
    )
    INTERRUPTED = (
        130,
        (
            "interrupted by Ctrl-C (SIGINT) or SIGTERM: what ran was stopped where it ran, its rounds so far kept "
            "with an `interrupted` summary"
        ),
    )
    OUTPUT_CLOSED = (
        141,
        (
            "its output's reader went away (`| head`, say): the command stopped printing, quietly, as a shell "
            "reports a process SIGPIPE ended (128 + 13); what it had run or written is kept"
        ),
    )
