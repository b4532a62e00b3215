"""Which embedding model and which reranker this install runs in-process: `models.json`.

It owns one small record in the data dir, written by `fathom models use`: the embedding model
the in-process encoder loads (a name, a model folder, a width), the cross-encoder folder the
reranker role may use on this machine, and every embedding model chosen before (`known`), so
that a table built by an earlier model is still queried with that model until it is rebuilt.
`with_chosen_models` applies the record to the settings a process starts from;
`EarlierEncoders` builds, on demand, the encoder of a table whose space an earlier model
defined; `moved_tables` says which tables of a project a switch left in an older space.

Switching the embedding model is a migration through the existing path, not a rewrite: the
next index of each project builds its tables in the new space in a shadow slot, under the gate,
and promotes them when whole; until then the old tables keep answering with their own encoder.

It refuses a record it cannot read (a typed error naming the file and the fix, never a
silent default that would re-embed every project), and it never loads a model: choosing is
cheap, loading is the encoders' business. An explicit `FATHOM_LOCAL_MODEL_PATH` wins over
the record (the environment is the operator's last word).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.config import Settings, atomic_write_text
from fathom.errors import ConfigError, FathomError
from fathom.inference.weights import located
from fathom.space import Space

if TYPE_CHECKING:  # pragma: no cover - the provider module loads numpy
    from fathom.inference.provider import Provider

MODELS_FILE = "models.json"


class ModelsFileError(ConfigError):
    """`models.json` in the data dir is unreadable or malformed."""

    def __init__(self, path: Path, defect: str):
        self.path = path
        super().__init__(
            f"{path} is not a readable model choice ({defect}): Fathom does not "
            f"start with it (no search, index or server), since another model "
            f"could answer tables it did not build. Repair the file, or remove "
            f"it (the default model is then used) and choose again with "
            f"`fathom models use embed NAME`"
        )


class ModelNameTaken(ConfigError):
    """A name asked for a model folder that another model already goes by: tables key their
    space on the name, so one name for two models would query a table with the wrong one."""

    def __init__(self, name: str, path: str, taken_by: str):
        self.name, self.path, self.taken_by = name, path, taken_by
        super().__init__(
            f"the name {name!r} is already the embedding model in {taken_by}, "
            f"not {path}: give this folder a name of its own with --name (or "
            f"choose {name!r} by its name alone); nothing was changed"
        )


@dataclass(frozen=True)
class EmbedModel:
    """An embedding model the in-process encoder can load: its name (the provider id and the
    tables' spaces key on it), its folder and its width."""

    name: str
    path: str
    width: int

    @property
    def provider_id(self) -> str:
        # imported here: the local encoder's module loads numpy, and `fathom models` is
        # registered on every CLI start, which must load none of the search stack
        from fathom.inference.local import local_provider_id

        return local_provider_id(self.name)


@dataclass(frozen=True)
class RerankerModel:
    """A cross-encoder folder that serves the reranker role in this process."""

    name: str
    path: str


@dataclass(frozen=True)
class ModelChoice:
    """What `models.json` holds. `embed` None: the settings' model (the built-in default)."""

    embed: EmbedModel | None = None
    reranker: RerankerModel | None = None
    known: tuple[EmbedModel, ...] = ()
    changed_at: str | None = None

    def with_embed(self, model: EmbedModel | None, replaced: EmbedModel) -> ModelChoice:
        """The choice with `model` as the embedding model (None: back to the default), the
        one it replaces kept in `known` so its tables still answer."""
        known = {m.name: m for m in (*self.known, replaced) if m.name != (model and model.name)}
        return ModelChoice(
            embed=model, reranker=self.reranker, known=tuple(known.values()), changed_at=_now()
        )

    def check_name_free(self, model: EmbedModel, *others: EmbedModel) -> None:
        """`ModelNameTaken` when a model this choice knows (or one of `others`: the default,
        the one in use) goes by `model`'s name with another folder or width."""
        for other in (*others, *([self.embed] if self.embed else []), *self.known):
            if other.name == model.name and (
                other.width != model.width or _folder(other.path) != _folder(model.path)
            ):
                raise ModelNameTaken(model.name, model.path, other.path)

    def with_reranker(self, model: RerankerModel | None) -> ModelChoice:
        return ModelChoice(embed=self.embed, reranker=model, known=self.known, changed_at=_now())

    def as_json(self) -> dict[str, Any]:
        return {
            "embed": asdict(self.embed) if self.embed else None,
            "reranker": asdict(self.reranker) if self.reranker else None,
            "known": [asdict(m) for m in self.known],
            "changed_at": self.changed_at,
        }


def _folder(path: str) -> Path:
    return Path(path).expanduser().resolve()


def _now() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")


def models_file(data_dir: Path) -> Path:
    return Path(data_dir).expanduser() / MODELS_FILE


def load_choice(data_dir: Path) -> ModelChoice:
    """The recorded choice, or the empty one when nothing was chosen yet."""
    path = models_file(data_dir)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ModelChoice()
    except (OSError, ValueError) as exc:
        raise ModelsFileError(path, type(exc).__name__) from None
    try:
        embed = raw.get("embed")
        reranker = raw.get("reranker")
        return ModelChoice(
            embed=_embed_of(embed) if embed else None,
            reranker=RerankerModel(str(reranker["name"]), str(reranker["path"])) if reranker else None,
            known=tuple(_embed_of(m) for m in raw.get("known") or []),
            changed_at=raw.get("changed_at"),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ModelsFileError(path, f"{type(exc).__name__}: {exc}") from None


def _embed_of(raw: Any) -> EmbedModel:
    width = int(raw["width"])
    if width < 1:
        raise ValueError(f"width {width} is not positive")
    return EmbedModel(str(raw["name"]), str(raw["path"]), width)


def save_choice(data_dir: Path, choice: ModelChoice) -> None:
    atomic_write_text(models_file(data_dir), json.dumps(choice.as_json(), indent=2) + "\n")


def env_pins_model(settings: Settings) -> bool:
    """Whether the model folder was given explicitly (FATHOM_LOCAL_MODEL_PATH or an argument):
    then it wins over `models.json`."""
    return "local_model_path" in settings.model_fields_set


def settings_model(settings: Settings) -> EmbedModel:
    """The embedding model the settings name, before any choice is applied."""
    return EmbedModel(settings.local_model_name, settings.local_model_path, settings.local_width)


def with_model(settings: Settings, model: EmbedModel) -> Settings:
    return settings.model_copy(
        update={"local_model_path": model.path, "local_model_name": model.name, "local_width": model.width}
    )


def with_chosen_models(settings: Settings) -> Settings:
    """The settings with the recorded embedding model applied (unless the environment names
    a model folder itself), and the default model's download located."""
    choice = load_choice(settings.data_dir)
    if choice.embed is not None and not env_pins_model(settings):
        settings = with_model(settings, choice.embed)
    # The default model by its Hub name, once downloaded: its folder in the cache.
    return located(settings)


def chosen_reranker(settings: Settings) -> Provider | None:
    """The recorded cross-encoder as a reranker provider (loaded on first use), or None."""
    choice = load_choice(settings.data_dir)
    if choice.reranker is None:
        return None
    from fathom.inference.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker(
        choice.reranker.path, model_name=choice.reranker.name, device=settings.local_device
    )


class EarlierEncoders:
    """The in-process encoders of tables an earlier embedding model built: each is built the
    first time a query of such a table needs it, and kept for the process's life.

    Only models this data dir recorded (or the settings' own default) qualify: a table is
    never queried with an encoder that did not define its space."""

    def __init__(self, settings: Settings, build: Callable[[Settings], Provider]):
        self.settings = settings
        self._build = build
        self._made: dict[str, Provider] = {}
        # Read once: the choice a process starts with holds for its life (a switch is taken
        # up at the next start), and a query must not read a file.
        self.candidates = [*load_choice(settings.data_dir).known, default_model()]

    def for_space(self, space: Space) -> Provider | None:
        """The encoder that defined `space`, when an earlier local model did; None otherwise."""
        for model in self.candidates:
            if model.provider_id == space.reference and model.width == space.width:
                if model.provider_id not in self._made:
                    self._made[model.provider_id] = self._build(with_model(self.settings, model))
                return self._made[model.provider_id]
        return None

    async def aclose(self) -> None:
        for provider in self._made.values():
            await provider.aclose()
        self._made.clear()


def default_model() -> EmbedModel:
    """The built-in model (what `Settings()` names without the environment or a choice)."""
    fields = Settings.model_fields
    path, name, width = (
        fields[f].get_default(call_default_factory=True)
        for f in ("local_model_path", "local_model_name", "local_width")
    )
    return EmbedModel(str(name), str(path), int(width))


def moved_tables(
    stored: Callable[[str], Space | None], current: Callable[[str], Space], tables: Iterable[str]
) -> list[str]:
    """The tables whose active space differs from the one a build gets now: the embedding
    model was switched since they were built, so an incremental run must rebuild them."""
    moved = []
    for table in tables:
        try:
            have, want = stored(table), current(table)
        except FathomError:
            continue  # the indexer says what is wrong with this table's space itself
        if have is not None and have != want:
            moved.append(table)
    return moved
