"""Error types that the CLI turns into exit codes."""


class FLTestError(Exception):
    """Base class of the errors FLTest reports as one line."""

    exit_code = 1


class InputError(FLTestError):
    """Bad input from the user (config, file, environment): exit code 2."""

    exit_code = 2


class DataError(InputError):
    """Bad input found in the data a config names (its columns, labels, a split that cannot be drawn).

    The data code names the config field; a command names the config file in front
    (:func:`fltest.config.loader.naming_the_file`).
    """


class BackendUnavailable(InputError):
    """A run asks for a framework that is not installed or not available here."""


class RunFailed(FLTestError):
    """A run started but did not complete (a client raised, a cluster failed)."""
