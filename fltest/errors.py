"""Error types that the CLI turns into exit codes."""


class FLTestError(Exception):
    """Base class of the errors FLTest reports as one line."""

    exit_code = 1


class InputError(FLTestError):
    """Bad input from the user (config, file, environment): exit code 2."""

    exit_code = 2


class BackendUnavailable(InputError):
    """A run asks for a framework that is not installed or not available here."""


class RunFailed(FLTestError):
    """A run started but did not complete (a client raised, a cluster failed)."""
