"""`fathom models`: the encoders and rerankers this install can run, and choosing them.

    fathom models [--json] [--measure]        what is installed, its width, size and cost here
    fathom models use embed NAME|PATH|default  the in-process embedding model
    fathom models use reranker NAME|PATH|none  the cross-encoder the reranker role may use

It owns the commands' words only: finding models is `fathom.inference.catalogue`, the record
is `fathom.inference.model_choice`. Switching the embedding model writes no table: each
project's next index builds its tables with the new model in a shadow slot, under the gate,
while the old tables keep answering with their own model until the new ones are promoted.

It refuses a name that is no model here and a folder of the wrong kind (an encoder given as
a reranker, or the other way round) before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from fathom.errors import ConfigError
from fathom.inference.catalogue import Entry, catalogue, measure, resolve
from fathom.inference.model_choice import (
    RerankerModel,
    default_model,
    env_pins_model,
    load_choice,
    save_choice,
    settings_model,
    with_chosen_models,
)

if TYPE_CHECKING:
    from fathom.config import Settings
    from fathom.service import Fathom

console = Console(soft_wrap=True)  # messages stay one line each, for scripts too
settings_of: Callable[[typer.Context], Settings]
fathom_of: Callable[[typer.Context], Fathom]

models_app = typer.Typer(
    help="The encoders and rerankers this install can run, and which are used.", no_args_is_help=False
)


def register(
    app: typer.Typer,
    *,
    settings: Callable[[typer.Context], Settings],
    service: Callable[[typer.Context], Fathom],
) -> None:
    """Attach `fathom models` to `app`, with the CLI's settings and service."""
    global settings_of, fathom_of
    settings_of, fathom_of = settings, service
    app.add_typer(models_app, name="models")


def _size(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} kB"


def _cost(entry: Entry) -> str:
    if not entry.cost:
        return "-"
    if "error" in entry.cost:
        return "not measured"
    return ", ".join(f"{k} {v:g}" for k, v in entry.cost.items())


def _models_table(entries: list[Entry]) -> Table:
    """The models as a table that keeps each name whole on one line at 80 columns: the name's
    column is as wide as the longest name, its source goes under it (dim, folded to that width),
    and the other columns fold instead; no box, so the columns cost one space each."""
    from rich.text import Text

    table = Table(
        title="Models this install can run (offline, in this process)",
        box=None,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("role", overflow="fold")
    table.add_column(
        "name and source",
        width=max([len("name and source")] + [len(e.name) for e in entries]),
        overflow="fold",
    )
    for col in ("width", "tokens", "size", "in use", "cost here"):
        table.add_column(col, overflow="fold")
    for e in entries:
        table.add_row(
            e.role,
            Text(e.name).append(f"\n{e.source}", style="dim"),
            str(e.width or "-"),
            str(e.max_tokens or "-"),
            _size(e.size_bytes),
            "yes" if e.in_use else "",
            _cost(e),
        )
    return table


@models_app.callback(invoke_without_command=True)
def models(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON list instead of a table.")] = False,
    measured: Annotated[
        bool,
        typer.Option("--measure", help="Load each model and time it on this machine (seconds to minutes)."),
    ] = False,
) -> None:
    """List the models this install can run in-process: role, width, size, use, cost here."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_of(ctx)
    entries = catalogue(settings)
    if measured:
        entries = [measure(e, with_chosen_models(settings)) for e in entries]
    if as_json:
        console.print_json(json.dumps([e.as_json() for e in entries]))
        return
    console.print(_models_table(entries))
    choice = load_choice(settings.data_dir)
    if choice.reranker is None:
        console.print(
            "No local reranker is chosen: searches rank by retrieval unless a sidecar or "
            "a cloud route serves the reranker role. `fathom models use reranker PATH` "
            "takes a cross-encoder folder."
        )
    if env_pins_model(settings):
        console.print(
            "FATHOM_LOCAL_MODEL_PATH names the embedding model: it wins over `fathom models use embed`."
        )
    for line in _tables_elsewhere(fathom_of(ctx)):
        console.print(line)


def _tables_elsewhere(service: Fathom) -> list[str]:
    """A line per table an earlier embedding model built: it answers with that model until
    the project's next index rebuilds it (a shadow being built says how far it is)."""
    lines = []
    for project in service.store.list_projects():
        for table, info in sorted(project.tables.items()):
            if info.space is None or info.space.reference == service.encoder.id:
                continue
            building = (
                f"; {info.shadow_rows} rows already rebuilt with {info.shadow_space.model}"
                if info.shadow_space is not None
                else ""
            )
            lines.append(
                f"{project.name} {table}: {info.rows} rows built by {info.space.model}, "
                f"answering with it until `fathom index` rebuilds it{building}"
            )
    return lines


@models_app.command("use")
def use(
    ctx: typer.Context,
    role: Annotated[str, typer.Argument(help="embed or reranker")],
    name: Annotated[
        str,
        typer.Argument(
            help="A name `fathom models` lists, a model folder's path, a Hugging Face Hub name (ORG/NAME: "
            "downloaded once into the model cache), or `default` (embed) / `none` (reranker)."
        ),
    ],
    as_name: Annotated[
        str | None,
        typer.Option(
            "--name", help="The name to record for a folder (its tables' model name); default: the folder's."
        ),
    ] = None,
) -> None:
    """Choose the embedding model or the reranker of this install (recorded in models.json)."""
    settings = settings_of(ctx)
    if role not in ("embed", "reranker"):
        raise ConfigError(f"role must be embed or reranker, not {role!r}")
    if role == "reranker":
        _use_reranker(settings, name, as_name)
    else:
        _use_embed(settings, name, as_name)


def _use_reranker(settings: Any, name: str, as_name: str | None) -> None:
    choice = load_choice(settings.data_dir)
    if name.lower() == "none":
        save_choice(settings.data_dir, choice.with_reranker(None))
        console.print(
            "No local reranker: searches are reranked by a sidecar or cloud route "
            "where one serves, else kept in retrieval order (each answer says why)."
        )
        return
    entry = resolve(settings, "reranker", name, as_name=as_name)
    save_choice(settings.data_dir, choice.with_reranker(RerankerModel(entry.name, entry.path)))
    console.print(
        f"Reranker: {entry.name} ({entry.path}), used by the next `fathom mcp` / "
        f"`fathom serve` / `fathom server` start; a running one keeps its own until restarted."
    )


def _use_embed(settings: Any, name: str, as_name: str | None) -> None:
    choice = load_choice(settings.data_dir)
    current = settings_model(with_chosen_models(settings))
    default = default_model()
    target = (
        default
        if name.lower() == "default"
        else resolve(settings, "embed", name, as_name=as_name).embed_model()
    )
    choice.check_name_free(target, default, current)  # before anything is written
    if target.name == current.name and target.width == current.width:
        console.print(f"{target.name} is already the embedding model: nothing changed.")
        return
    new = None if target.name == default.name else target
    save_choice(settings.data_dir, choice.with_embed(new, replaced=current))
    console.print(
        f"Embedding model: {target.name} ({target.width}-d) instead of {current.name}. "
        f"Each project's next `fathom index` builds its tables with it in full, under the "
        f"gate; until then its tables keep answering with {current.name}. A running "
        f"server picks the change up when restarted."
    )
    if env_pins_model(settings):
        console.print("FATHOM_LOCAL_MODEL_PATH is set and names the model until it is unset.")
