"""Import a module the user's config names (hooks, a model): whatever it does wrong on import is one line."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from fltest.errors import FieldError, InputError


def where_it_failed(module_name: str, exc: BaseException) -> str:
    """``<file>, line <n>: <Error>: <message>`` for an exception the user's module raised (its own frame, if any)."""
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}, line {exc.lineno}: SyntaxError: {exc.msg}"
    spec = importlib.util.find_spec(module_name)
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if spec is not None and f.filename == spec.origin] or frames
    error = "".join(traceback.format_exception_only(exc)).strip().splitlines()[-1]
    return f"{own[-1].filename}, line {own[-1].lineno}: {error}"


def _import_failure(field: str, module_name: str, exc: BaseException) -> InputError:
    """One line for a module that raised while being imported: its file and line, and the error."""
    return InputError(f"{field}: module {module_name!r} failed to import: {where_it_failed(module_name, exc)}")


def import_user_module(field: str, module_name: str) -> ModuleType:
    """Import ``module_name``, which the config's ``field`` names; any failure is one :class:`InputError` naming ``field``."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise InputError(f"{field}: no module {module_name!r} beside the config or on sys.path") from None
        raise _import_failure(field, module_name, exc) from None
    except (Exception, SystemExit) as exc:  # the user's code may raise anything, even exit
        raise _import_failure(field, module_name, exc) from None


def module_source(field: str, module_name: str) -> Path:
    """The Python source of ``module_name``'s top-level module, as this process imports it: its ``.py`` file or package folder.

    What travels with a Flower App to hosts that do not share this file system. Raises
    :class:`FieldError` naming ``field`` for a module that is not Python source (a compiled
    extension, a namespace package); a command names the config file in front.
    """
    top = module_name.partition(".")[0]
    module = sys.modules.get(top) or import_user_module(field, top)
    origin = Path(module.__file__) if getattr(module, "__file__", None) else None
    if origin is not None and hasattr(module, "__path__") and origin.name == "__init__.py":
        return origin.parent
    if origin is None or origin.suffix != ".py":
        raise FieldError(
            f"{field}: module {top!r} ({origin or 'a namespace package'}) is not a Python source file or package, "
            "the only code a Flower App carries"
        )
    return origin
