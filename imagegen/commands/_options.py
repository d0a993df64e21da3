"""The commands' options: those made from the one table (``imagegen.options``), and a few shared
``Annotated`` aliases of the commands' own.

``table_options(command)`` gives a command every option of the table that command takes, each
value resolved once, here (``options.resolve``: flag > ``IMAGEGEN_*`` > the row's default): the
options of what the image is arrive packed in one ``SpecInput`` (the ``image`` parameter, for the
commands that have one), those of how a run behaves in one ``RunOptions`` (the ``run`` parameter:
the rows its fields take, ``--sign-key``, ``--max-size``...), the others (``--push``, ``--op-source``
of ``ops``...) under their own names. A command declares none of them itself, so adding an option
to the table adds it to every command that takes it.

Typer reads these annotations at run time, so this module spells optional types with
``Optional`` (the package supports Python 3.9, where ``X | None`` cannot be evaluated).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Optional, TypeVar

import typer

from imagegen import options
from imagegen.errors import BadInputError
from imagegen.imagespec.checks import platform_name
from imagegen.imagespec.spec import SpecInput
from imagegen.options import ImageOption
from imagegen.runs.run_choices import RunOptions

# ctx.meta key: set by --json's callback so the error handler knows the output format.
JSON_META_KEY = "imagegen.json"


def _remember_json(ctx: typer.Context, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META_KEY] = True
    return value


JsonOption = Annotated[
    bool,
    typer.Option("--json", help="Print a JSON document on stdout instead of text.", callback=_remember_json),
]


def typer_annotation(option: ImageOption) -> Any:
    """The ``Annotated[type, typer.Option(...)]`` of one option of the table."""
    python_type: Any
    if option.form == "repeat":
        python_type = Optional[list[str]]
    elif option.form in ("switch", "toggle"):
        # A switch with a variable is None when not given, so the variable may fill it.
        python_type = Optional[bool] if option.env_name or option.form == "toggle" else bool
    else:
        python_type = Optional[option.value_type]
    info = typer.Option(
        *option.flags,
        metavar=option.metavar,
        help=option.help_text(),
        rich_help_panel=option.panel,
    )
    return Annotated[python_type, info]


def _default(option: ImageOption) -> Any:
    """The parameter's default: None (False for a switch without a variable), so the cascade can
    tell a flag left off; the row's default where --help shows it (``show_default``)."""
    if option.show_default:
        return option.default
    if option.form == "switch" and not option.env_name:
        return False
    return None


F = TypeVar("F", bound=Callable[..., Any])


def table_options(command: str) -> Callable[[F], F]:
    """Give the decorated command the table's options for ``command`` (see the module's doc)."""
    table = options.for_command(command)

    def decorate(func: F) -> F:
        own = inspect.signature(func)
        # What the image is, in one SpecInput; verify's and sbom's ``image`` is their IMAGE argument.
        image = own.parameters.get("image")
        packed = image is not None and _evaluated(image.annotation, func) is SpecInput
        spec_options = [o for o in table if o.spec and packed]
        run_options = {o.name: o for o in table if not (o.spec and packed)}
        # How the run behaves, in one RunOptions: the rows its fields take (a row the command
        # declares too is also handed to it, as its own rules read it: the push plan's).
        run = own.parameters.get("run")
        run_class = None if run is None else _evaluated(run.annotation, func)
        if not (isinstance(run_class, type) and issubclass(run_class, RunOptions)):
            run_class = None
        run_rows = [] if run_class is None else [n for n in run_class.row_names() if n in run_options]
        packed_run = [name for name in run_rows if name not in own.parameters]  # not the command's own
        parameters = []
        for param in own.parameters.values():
            if param.name == "image" and packed:
                parameters += [_parameter(o) for o in spec_options]
            elif param.name == "run" and run_rows:
                parameters += [_parameter(run_options[name]) for name in packed_run]
            elif param.name in run_options:  # its annotation here is only for the type checker
                parameters.append(_parameter(run_options[param.name]))
            else:  # the command's own: its Annotated alias, evaluated where the command is
                parameters.append(param.replace(annotation=_evaluated(param.annotation, func)))
        missing = set(run_options) - set(own.parameters) - set(run_rows)
        if missing:
            raise TypeError(f"{func.__name__} takes no parameter for {sorted(missing)}")

        @functools.wraps(func)
        def command_function(**kwargs: Any) -> Any:
            flags = {o.name: kwargs.pop(o.name) for o in table if o.name in kwargs}
            # The cascade, once for this command: flag > IMAGEGEN_* variable > the row's default.
            values = options.resolve(flags, os.environ, command)
            if packed:
                kwargs["image"] = SpecInput(**{o.name: values.pop(o.name) for o in spec_options})
            if run_class is not None:
                kwargs["run"] = run_class.from_rows({name: values[name] for name in run_rows})
                for name in packed_run:
                    del values[name]
            return func(**kwargs, **values)

        signature = own.replace(parameters=parameters)
        command_function.__signature__ = signature  # type: ignore[attr-defined]
        command_function.__annotations__ = {p.name: p.annotation for p in parameters}
        return command_function  # type: ignore[return-value]

    return decorate


def _evaluated(annotation: Any, func: Callable[..., Any]) -> Any:
    """A string annotation (``from __future__ import annotations``) as the object it names."""
    return eval(annotation, func.__globals__) if isinstance(annotation, str) else annotation


def _parameter(option: ImageOption) -> inspect.Parameter:
    return inspect.Parameter(
        option.name,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        default=_default(option),
        annotation=typer_annotation(option),
    )


def by_platform(option: str, values: Sequence[str], example: str) -> dict[str, str]:
    """``OS/ARCH=VALUE`` items (``--platform-torch``, ``--platform-wheelhouse``) -> {platform:
    value}; bad input for an item without ``=`` or a value, or a platform named twice (which of
    its values is meant?)."""
    chosen: dict[str, str] = {}
    for value in values:
        platform, sep, given = value.partition("=")
        if not sep or not given.strip():
            raise BadInputError(f"{option} {value!r}: give OS/ARCH=VALUE", hint=f"e.g. {option} {example}")
        name = platform_name(platform, option)
        if name in chosen:
            raise BadInputError(
                f"{option} names {name} twice ({chosen[name]!r} and {given.strip()!r})",
                hint=f"give {option} once for each platform, e.g. {option} {example}",
            )
        chosen[name] = given.strip()
    return chosen
