"""The runs of an experiment, typed: one model a framework (and Flower mode), with its own options.

A run in the config is ``{name, framework, options}``. Which model validates it follows from
``framework`` and, for ``flwr``, ``options.mode`` (``simulation`` when absent): an unknown or
mistyped option is refused by the schema, with the field's path. :func:`describe_run_error`
words those refusals the way FLTest always has (``runs.<run name>.options.<key>: ...``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictBool, StrictInt, Tag

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
FRAMEWORKS = ("reference", "flwr", "nvflare")
FLWR_MODES = ("simulation", "deployment")
SUPERLINK_PATTERN = r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$"  # <host>:<port>, the host a name, IPv4 or [IPv6]


class _Options(BaseModel):
    """A run's options: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoOptions(_Options):
    """The reference backend takes no options."""


class FlwrSimulationOptions(_Options):
    """A Flower simulation on Ray (a private one, or the cluster ``FLTEST_RAY_ADDRESS`` names)."""

    mode: Literal["simulation"] = Field("simulation", description="`simulation`: Flower's simulation engine on Ray.")


class FlwrDeploymentOptions(_Options):
    """A Flower deployment: the SuperLink's Control API address and the CA its certificate is checked with."""

    mode: Literal["deployment"] = Field(description="`deployment`: a SuperLink and its SuperNodes.")
    superlink: Annotated[str, Field(pattern=SUPERLINK_PATTERN)] = Field(
        description="The SuperLink's Control API, `<host>:<port>` (the kit's: `127.0.0.1:9443`, in its namespace)."
    )
    root_certificates: Path = Field(  # ``~`` is expanded where it is used
        description="The CA file the SuperLink's certificate is checked with, relative to the config file "
        "(`~`: the home of whoever reads the config)."
    )


class NVFlareOptions(_Options):
    """The NVFlare simulator: how many clients it runs at once; ``keep_workspace`` keeps its job and workspace."""

    keep_workspace: StrictBool = Field(
        False, description="Keep the run's NVFlare job and simulator workspace in `<run folder>/nvflare/`."
    )
    threads: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None,
        description="How many clients the simulator runs at once (its `-t`), at most `clients`; with fewer, a "
        "client's every task starts a worker process of its own. Default: every client, up to what this machine's "
        "CPUs can start at once and its memory holds (the run's start line says the number).",
    )


class _Run(BaseModel):
    """What every run has: a name, unique in the experiment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=RUN_NAME_PATTERN)] = Field(
        description="The run's name, unique in the experiment: its results folder."
    )


class ReferenceRun(_Run):
    """FedAvg in plain numpy: the ground truth."""

    framework: Literal["reference"] = Field(description="`reference`: FedAvg in plain numpy, in process.")
    options: NoOptions = Field(NoOptions(), description="None: the reference takes no options.")


class FlwrSimulationRun(_Run):
    """Flower's simulation engine."""

    framework: Literal["flwr"] = Field(description="`flwr`: Flower 1.42.")
    options: FlwrSimulationOptions = Field(FlwrSimulationOptions(), description="A simulation's options.")


class FlwrDeploymentRun(_Run):
    """Flower's deployment engine: a SuperLink and its SuperNodes."""

    framework: Literal["flwr"] = Field(description="`flwr`: Flower 1.42.")
    options: FlwrDeploymentOptions = Field(
        description="A deployment's options: `mode`, `superlink`, `root_certificates`."
    )


class NVFlareRun(_Run):
    """The NVFlare simulator."""

    framework: Literal["nvflare"] = Field(description="`nvflare`: the NVFlare 2.9 simulator (the `nvflare` extra).")
    options: NVFlareOptions = Field(NVFlareOptions(), description="The simulator's options.")


def run_kind(run: Any) -> str | None:
    """The kind of a run, as raw config or as a model: its framework, ``flwr-<mode>`` for Flower."""
    if isinstance(run, dict):
        framework, options = run.get("framework"), run.get("options")
        mode = options.get("mode", "simulation") if isinstance(options, dict) else "simulation"
    else:
        framework, mode = run.framework, getattr(run.options, "mode", None)
    return f"flwr-{mode}" if framework == "flwr" else framework


RunConfig = Annotated[
    Annotated[ReferenceRun, Tag("reference")]
    | Annotated[FlwrSimulationRun, Tag("flwr-simulation")]
    | Annotated[FlwrDeploymentRun, Tag("flwr-deployment")]
    | Annotated[NVFlareRun, Tag("nvflare")],
    Discriminator(run_kind),
]

_OPTIONS_OF_KIND = {  # the tags of RunConfig's union, which pydantic puts in an error's location
    "reference": NoOptions,
    "flwr-simulation": FlwrSimulationOptions,
    "flwr-deployment": FlwrDeploymentOptions,
    "nvflare": NVFlareOptions,
}


def _quoted(values: tuple[str, ...]) -> str:
    """``'a', 'b' or 'c'``."""
    quoted = [repr(v) for v in values]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def without_run_kind(loc: tuple) -> tuple:
    """An error's location without the run kind pydantic puts after ``runs.<index>``."""
    return loc[:2] + loc[3:] if len(loc) > 2 and loc[0] == "runs" and loc[2] in _OPTIONS_OF_KIND else loc


def describe_run_error(error: dict[str, Any], runs: Any) -> str | None:
    """``<field path>: <message>`` for a pydantic error inside ``runs``, or ``None`` for any other.

    ``runs`` is the raw ``runs`` list. An option's error names its run by name; a run's own
    fields (``name``, ``framework``) by position, as the file has it.
    """
    loc = error["loc"]
    if len(loc) < 2 or loc[0] != "runs" or not isinstance(loc[1], int) or not isinstance(runs, list):
        return None
    index = loc[1]
    raw = runs[index] if index < len(runs) and isinstance(runs[index], dict) else {}
    by_name = f"runs.{raw['name']}" if isinstance(raw.get("name"), str) else f"runs.{index}"
    if error["type"] == "union_tag_not_found":
        return f"runs.{index}.framework: required (one of {_quoted(FRAMEWORKS)})"
    if error["type"] == "union_tag_invalid":
        framework = raw.get("framework")
        if framework == "flwr":
            mode = raw["options"].get("mode")
            return f"{by_name}.options.mode: {mode!r}: expected {_quoted(FLWR_MODES)}"
        return f"runs.{index}.framework: {framework!r}: expected {_quoted(FRAMEWORKS)}"
    if len(loc) < 4 or loc[3] != "options":  # a run's own field (its kind is loc[2]), or the run itself
        return None
    kind, field = str(loc[2]), ".".join(str(part) for part in loc[4:])
    where = f"{by_name}.options" + (f".{field}" if field else "")
    if error["type"] == "extra_forbidden":
        known = ", ".join(_OPTIONS_OF_KIND[kind].model_fields) or "none"
        return f"{where}: unknown option for {raw.get('framework')} (known: {known})"
    if error["type"] == "missing":
        return f"{where}: required with mode {kind.removeprefix('flwr-')}"
    if error["type"] == "string_pattern_mismatch" and field == "superlink":
        return f"{where}: {error['input']!r}: expected <host>:<port>"
    if error["type"] == "model_type":
        return f"{where}: must be a mapping (key: value)"
    if error["type"] == "path_type":
        return f"{where}: must be a file path, got {error['input']!r}"
    if error["type"] == "bool_type":
        return f"{where}: must be true or false, got {error['input']!r}"
    return f"{where}: {error['msg']}"
