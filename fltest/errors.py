"""Error types that the CLI turns into exit codes."""

from fltest.exit_codes import ExitCode


class FLTestError(Exception):
    """Base class of the errors FLTest reports as one line."""

    exit_code: int = ExitCode.FAILED


class InputError(FLTestError):
    """Bad input from the user (config, file, environment): exit code 2."""

    exit_code: int = ExitCode.BAD_INPUT


class FieldError(InputError):
    """Bad input a config field leads to, found after the config was loaded: in the data it names, a user's model.

    The message names the field; a command names the config file in front
    (:func:`fltest.config.loader.naming_the_file`).
    """


class BackendUnavailable(InputError):
    """A run asks for a framework that is not installed or not available here."""


class RunFailed(FLTestError):
    """A run started but did not complete (a client raised, a cluster failed)."""
