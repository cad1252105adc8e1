"""All runtime settings in one place (pydantic-settings).

Every value can be set by environment variable, as `SCHEMABRIDGE_<NAME>` or as the bare
`<NAME>` (the prefixed one wins when both are set). The bare form is how the operator contract
spells `TIMEOUT_COLLECT_MS`, `BACKPRESSURE_MAX_DEPTH`, `POLL_INTERVAL_MS`, …
(docs/architecture.md, 'Configuration'). Nothing reads the environment anywhere else; a
`Settings` is built once by the factory and passed down
(docs/architecture.md, 'No process-global state').
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine import payload_defaults
from engine.store.pooler import POOLERS, Pooler
from schemas.definitions import MAX_TIMEOUT_MS, MIN_TIMEOUT_MS
from schemas.json_depth import DEFAULT_MAX_NESTING_DEPTH, HARD_MAX_NESTING_DEPTH
from vertices import fanout_limits
from vertices.egress import LOOPBACK_ALLOW, EgressPolicy, IPNetwork

ENV_PREFIX = "SCHEMABRIDGE_"
TEST_ENV_PREFIX = "SCHEMABRIDGE_TEST_"
SERVICE_LINK = re.compile(
    r"SCHEMABRIDGE_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)"
)
"""The variables Kubernetes gives every pod for a Service named `schemabridge` (its host and
ports: `SCHEMABRIDGE_SERVICE_HOST`, `SCHEMABRIDGE_PORT_8000_TCP`, …): no setting, and not a
mistake to warn of."""
"""Reserved for the test suite's own variables (`SCHEMABRIDGE_TEST_REDIS`,
`SCHEMABRIDGE_TEST_PG`): no setting is named so, and `unknown_env_names` passes them over, so
processes a test starts with its environment are not refused."""


def _env(name: str) -> AliasChoices:
    """Accept `SCHEMABRIDGE_<NAME>` and the bare `<NAME>` (the operator contract's spelling)."""
    return AliasChoices(f"{ENV_PREFIX}{name}", name)


MAX_WORKER_CONCURRENCY = 4096
"""The most steps in flight per worker process. A worker holds up to twice that in claims
(executing, and executed but not yet recorded), and renewing or giving back its claims binds
two values per claim in one statement: 8,192 claims x 2 stays well under the 32,766 values
SQLite and asyncpg accept. More throughput comes from more worker processes."""


TRUSTED_PROXIES_FORMAT = (
    "Each entry is an address (10.1.2.3, fd00::1) or a CIDR network (10.0.0.0/8, fd00::/8) "
    "of your proxies, separated by commas; empty trusts none."
)


def parse_trusted_proxies(text: str) -> tuple[IPNetwork, ...]:
    """The networks of `SCHEMABRIDGE_TRUSTED_PROXIES` (an address is its /32 or /128).
    Every bad entry is named in one ValueError. `*` and /0 networks are refused: with every
    peer trusted, any client would choose the address it is logged with."""
    networks: list[IPNetwork] = []
    problems: list[str] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        parsed = _trusted_proxy(entry)
        if isinstance(parsed, str):
            problems.append(parsed)
        else:
            networks.append(parsed)
    if problems:
        raise ValueError(
            f"the trusted-proxy list has {len(problems)} bad "
            f"entr{'y' if len(problems) == 1 else 'ies'}: "
            f"{'; '.join(problems)}. {TRUSTED_PROXIES_FORMAT}"
        )
    return tuple(networks)


def _trusted_proxy(entry: str) -> IPNetwork | str:
    """`entry` as a network, or what is wrong with it."""
    if entry == "*":
        return "'*' (every peer) is not accepted: any client could then set its own address"
    # IPv4 or IPv6 by its spelling, so that a bad prefix length is named as such.
    kind = ipaddress.IPv6Network if ":" in entry else ipaddress.IPv4Network
    try:
        network = kind(entry)
    except ipaddress.NetmaskValueError as error:
        return f"'{entry}' has a bad prefix length ({error})"
    except ValueError:
        try:
            loose = kind(entry, strict=False)
        except ValueError:
            return f"'{entry}' is not an address or a CIDR network"
        return f"'{entry}' has host bits set (did you mean {loose}?)"
    if network.prefixlen == 0:
        return f"'{entry}' trusts every peer: any client could then set its own address"
    return network


def comma_list(value: object) -> object:
    """A list setting as the environment gives it: `5, 10, 20` (as the README writes the
    defaults) or JSON, `[5, 10, 20]`; anything else is left to the field's type. A JSON
    list that does not parse is a ValueError, said as the setting's one line."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"not a JSON list ({error.msg}); write numbers separated by commas, e.g. 5,10,20"
            ) from None
    return [part.strip() for part in text.split(",") if part.strip()]


DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./schemabridge.db"
"""The store when SCHEMABRIDGE_DATABASE_URL is not set: a file in the working directory."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    database_url: str = Field(
        default=DEFAULT_DATABASE_URL,
        validation_alias=_env("DATABASE_URL"),
    )
    """The store. Default: an embedded SQLite file; any `sqlite:///path.db`. PostgreSQL as
    libpq writes it, `postgresql://user@host:5432/db` or `postgres://…` (with `sslmode`,
    `connect_timeout`, `application_name` or `options` if wanted; `connect_options` says
    which query parameters are taken). The explicit `sqlite+aiosqlite://` and
    `postgresql+asyncpg://` work too; these are the drivers every form runs on
    (`engine.store.db.normalise_url`)."""
    database_pooler: Pooler = Field(default="none", validation_alias=_env("DATABASE_POOLER"))
    """What stands between the processes and PostgreSQL: `none` (a direct connection, or
    PgBouncer in session mode) or `transaction` (PgBouncer in transaction mode: asyncpg's
    prepared statements are then unnamed, kept on no server connection;
    `engine.store.pooler`). Default `none`."""
    redis_url: str | None = Field(default=None, validation_alias=_env("REDIS_URL"))
    """Redis URL for coordination; default None = the embedded in-process fakeredis."""

    # The tiers hold the bounds a vertex's own `timeoutMs` is published with: 0 or a
    # negative number would time every call out before it is sent.
    timeout_collect_ms: int = Field(
        default=60_000,
        ge=MIN_TIMEOUT_MS,
        le=MAX_TIMEOUT_MS,
        validation_alias=_env("TIMEOUT_COLLECT_MS"),
    )
    """GATEWAY timeout in a run that feeds a spawner. Default 60 s."""
    timeout_process_ms: int = Field(
        default=30_000,
        ge=MIN_TIMEOUT_MS,
        le=MAX_TIMEOUT_MS,
        validation_alias=_env("TIMEOUT_PROCESS_MS"),
    )
    """GATEWAY timeout inside a child run (and any other run). Default 30 s."""
    timeout_gateway_ms: int = Field(
        default=15_000,
        ge=MIN_TIMEOUT_MS,
        le=MAX_TIMEOUT_MS,
        validation_alias=_env("TIMEOUT_GATEWAY_MS"),
    )
    """GATEWAY timeout of a run submitted with REST `?wait=true`, which waits this and
    `SYNC_WAIT_GRACE_S` more (`engine.operations.submission.timeout_tier`). Default 15 s."""

    worker_concurrency: int = Field(
        default=64, ge=1, le=MAX_WORKER_CONCURRENCY, validation_alias=_env("WORKER_CONCURRENCY")
    )
    """Steps in flight per worker process, 1 to `MAX_WORKER_CONCURRENCY`. Default 64."""
    claim_batch: int = Field(default=32, ge=1, validation_alias=_env("CLAIM_BATCH"))
    """Steps claimed per store round trip. Default 32."""
    lease_s: float = Field(default=30.0, gt=0, validation_alias=_env("LEASE_S"))
    """Claim lease; renewed every `lease_s / 3` while a step runs. Default 30 s."""
    idle_poll_s: float = Field(default=1.0, gt=0, validation_alias=_env("IDLE_POLL_S"))
    """Fallback poll interval when no wake-up arrives. Default 1 s."""
    shutdown_grace_s: float = Field(default=20.0, ge=0, validation_alias=_env("SHUTDOWN_GRACE_S"))
    """How long in-flight steps may finish on SIGTERM before being abandoned. Default 20 s."""

    # NoDecode: pydantic-settings would read a list from the environment as JSON only, and
    # `5,10,20` would be a SettingsError traceback; `comma_list` takes both spellings.
    redispatch_delays_s: Annotated[tuple[float, ...], NoDecode] = Field(
        default=(5.0, 10.0, 20.0), validation_alias=_env("REDISPATCH_DELAYS_S")
    )
    """Minimum waits before redispatches of an `external_overload` step, separated by commas
    (`5,10,20`) or as a JSON list (`[5, 10, 20]`). Default 5, 10, 20 s."""

    admission_enabled: bool = Field(default=True, validation_alias=_env("ADMISSION_ENABLED"))
    """AIMD admission, breakers, retry budget and tenant rate limits around GATEWAY calls.
    Default on; off only for measuring the engine without them."""
    admission_wait_s: float = Field(default=30.0, ge=0, validation_alias=_env("ADMISSION_WAIT_S"))
    """How long a step waits for an admission slot before it is redispatched (as an
    `external_overload`). Default 30 s."""
    tenant_rate_per_minute: int = Field(
        default=1_000, ge=1, validation_alias=_env("TENANT_RATE_PER_MINUTE")
    )
    """Items (GATEWAY calls) per minute per tenant; at the limit a step waits 5 s. Default
    1,000. Per-tenant overrides: `schemabridge tenants set-rate`."""
    aimd_backoff_ratio: float = Field(
        default=0.9, gt=0, lt=1, validation_alias=_env("AIMD_BACKOFF_RATIO")
    )
    """Multiplicative decrease of a destination's limit on overload. Default 0.9, chosen by
    the capacity benchmark (bench/results-admission.md: with the Retry-After hold, 0.9 has the
    best goodput at under 1 % 429s; 0.5 and 0.7 lose a fifth to a third of it)."""
    default_max_concurrency: int = Field(
        default=100, ge=1, validation_alias=_env("DEFAULT_MAX_CONCURRENCY")
    )
    """Concurrency cap of a destination without configured caps. Default 100."""

    heartbeat_interval_s: float = Field(
        default=10.0, gt=0, validation_alias=_env("HEARTBEAT_INTERVAL_S")
    )
    heartbeat_ttl_s: int = Field(default=30, gt=0, validation_alias=_env("HEARTBEAT_TTL_S"))
    """Checked against the interval at start (`_check_heartbeat_ttl`)."""
    poll_interval_ms: int = Field(default=15_000, validation_alias=_env("POLL_INTERVAL_MS"))
    """How often the service monitor polls heartbeats. Default 15 s."""
    health_dir: Path = Field(default=Path(".healthy"), validation_alias=_env("HEALTH_DIR"))

    backpressure_max_depth: int = Field(
        default=10_000, validation_alias=_env("BACKPRESSURE_MAX_DEPTH")
    )
    """Ready-queue depth above which spawners park for 10 s. Default 10,000."""
    submit_max_ready: int = Field(default=50_000, ge=1, validation_alias=_env("SUBMIT_MAX_READY"))
    """Ready-queue depth from which new submissions are refused (`queue_full`, retry after
    5 s; the REST API answers 429) until workers catch up. Default 50,000."""

    spawn_batch: int = Field(default=500, ge=1, le=10_000, validation_alias=_env("SPAWN_BATCH"))
    """Children a spawner creates per transaction. Default 500."""
    payload_high_water_bytes: int = Field(
        default=payload_defaults.PAYLOAD_HIGH_WATER_BYTES,
        validation_alias=_env("PAYLOAD_HIGH_WATER_BYTES"),
    )
    """Payload-store size above which spawners park until it drains. Default 512 MiB."""
    payload_retention_s: float = Field(
        default=payload_defaults.PAYLOAD_RETENTION_S,
        ge=0,
        validation_alias=_env("PAYLOAD_RETENTION_S"),
    )
    """How long the payloads of a run (its MERGEs' outputs past 256 KiB) are kept after the
    run ends (SUCCEEDED, FAILED or CANCELLED); workers then delete them, which is how the
    payload store drains below its high-water mark. A run reopened by an operator keeps
    what is left of them while it runs; a step that reads a join's outputs once they are
    (even partly) gone fails, and the run is started over to merge again. Default 7 days."""
    run_retention_s: float = Field(default=0.0, ge=0, validation_alias=_env("RUN_RETENTION_S"))
    """How long a root run is kept after it ends (SUCCEEDED, FAILED or CANCELLED); workers then
    delete it with its whole tree: child runs, steps, log lines and payloads
    (docs/architecture.md, 'Run retention'). 0 (the default) keeps runs for ever: deleting
    history is the operator's choice. When set, at least `payload_retention_s`."""
    merge_outputs_read_max_bytes: int = Field(
        default=payload_defaults.MERGE_OUTPUTS_READ_MAX_BYTES,
        ge=0,
        validation_alias=_env("MERGE_OUTPUTS_READ_MAX_BYTES"),
    )
    """Largest MERGE output list (its `outputsRef.bytes`, JSON in UTF-8) a step's expressions
    may load from the payload store to read `outputs`; a step whose expressions read a larger
    one fails with `expression_error`. Loaded, the list takes several times that in the
    worker's memory while the step runs. Default 64 MiB."""

    max_document_bytes: int = Field(
        default=1_048_576, ge=1, validation_alias=_env("MAX_DOCUMENT_BYTES")
    )
    """Largest accepted workflow document. Default 1 MiB."""
    max_vertices: int = Field(default=500, ge=1, validation_alias=_env("MAX_VERTICES"))
    """Most vertices in one workflow. Default 500."""
    max_subschemas: int = Field(default=1_000, ge=1, validation_alias=_env("MAX_SUBSCHEMAS"))
    """Most sub-schemas in the inputSchemas of one workflow document, all its workflows
    together (each inputSchema and every schema inside it). Default 1,000."""
    max_expressions: int = Field(default=10_000, ge=1, validation_alias=_env("MAX_EXPRESSIONS"))
    """Most `{{ }}` expressions in the vertices of one workflow document, all its workflows
    together. Default 10,000."""
    max_nesting_depth: int = Field(
        default=DEFAULT_MAX_NESTING_DEPTH, ge=1, validation_alias=_env("MAX_NESTING_DEPTH")
    )
    """Most nested arrays and objects (the outermost counts as 1) in any JSON SchemaBridge
    reads: a workflow document, a REST request body, a run input, an operator's resolved
    output, a downstream's JSON answer. Default 64; 256 is used whatever it says above that
    (deeper data could exhaust Python's stack in the recursive JSON and JSON Schema code).
    Read it through `nesting_depth_limit`, which applies that ceiling."""
    max_input_bytes: int = Field(default=256 * 1024, ge=1, validation_alias=_env("MAX_INPUT_BYTES"))
    """Largest run input, as compact JSON in UTF-8 bytes. Default 256 KiB. (An operator's
    resolved step output is bounded by `max_response_bytes` instead.)"""
    max_fanout_items: int = Field(
        default=1_000_000, ge=1, validation_alias=_env("MAX_FANOUT_ITEMS")
    )
    """Most children one SPAWNER step may start; more items fail the step with
    `too_many_items`. Default 1,000,000."""
    max_fanout_input_bytes: int = Field(
        default=fanout_limits.DEFAULT_MAX_FANOUT_INPUT_BYTES,
        ge=1,
        validation_alias=_env("MAX_FANOUT_INPUT_BYTES"),
    )
    """Most bytes of child inputs (compact JSON, UTF-8) one SPAWNER step may write in all; the
    batch of children that would cross it is not written and the step fails with
    `invalid_config` (each child's input is also held to `max_input_bytes`). Default 256 MiB
    (docs/security.md, 'Input limits', says why)."""
    max_response_bytes: int = Field(
        default=1_048_576, ge=1, validation_alias=_env("MAX_RESPONSE_BYTES")
    )
    """Most bytes of a downstream response body a GATEWAY step keeps in its output (after
    content decoding); a longer body is cut there, never read further, kept as text and
    flagged `bodyTruncated: true`. Also the largest output an operator may resolve a step
    with, as compact JSON (larger: 422 `output_too_large`). Default 1 MiB."""
    egress_allow: str = Field(default="", validation_alias=_env("EGRESS_ALLOW"))
    """What the egress policy admits beyond public addresses: CIDRs (`10.0.0.0/8`), addresses
    and host patterns (`billing.internal`, `*.internal`), separated by commas
    (docs/security.md, 'Egress policy'). Default: nothing (loopback, private, link-local and
    the other internal ranges are refused)."""

    max_body_bytes: int = Field(
        default=10 * 1024 * 1024, ge=1, validation_alias=_env("MAX_BODY_BYTES")
    )
    """Largest request body the REST API reads; a larger one is refused with 413
    `body_too_large` (from Content-Length, or while a chunked body streams in). Default
    10 MiB."""
    auth: bool = Field(default=True, validation_alias=_env("AUTH"))
    """REST API authentication with API keys. Default on; `SCHEMABRIDGE_AUTH=off` (or
    `schemabridge serve --demo`) turns it off, and every request then acts as an admin named
    "demo"."""
    secret_keys: SecretStr | None = Field(default=None, validation_alias=_env("SECRET_KEYS"))
    """Fernet keys that encrypt the secrets workflows reference, comma-separated: the first
    encrypts, every one decrypts (`schemabridge secrets rotate` re-encrypts every secret under
    the first). Default none: secrets cannot be set or used. Needed by the processes that set
    secrets (CLI, API) and by workers; a `SecretStr`, so it never shows in a repr or a log."""
    health_timeout_s: float = Field(default=2.0, gt=0, validation_alias=_env("HEALTH_TIMEOUT_S"))
    """How long `/health` (and each source of `/metrics`) waits for the database and Redis
    before reporting them failing. Default 2 s."""
    trusted_proxies: str = Field(default="", validation_alias=_env("TRUSTED_PROXIES"))
    """The reverse proxies and load balancers whose `X-Forwarded-For` the HTTP servers (`api`,
    `serve`, a worker's `--health-port`) believe: addresses and CIDR networks, IPv4 or IPv6,
    separated by commas (docs/security.md, 'The access log'). The client is then the
    right-most address of that header that is not a trusted proxy, for a connection from a
    trusted proxy only. Default: none (the client is always the connection's peer)."""

    @field_validator("database_pooler", mode="before")
    @classmethod
    def _check_database_pooler(cls, value: object) -> object:
        chosen = value.strip().lower() if isinstance(value, str) else value
        if chosen not in POOLERS:
            raise ValueError(
                f"give none (PostgreSQL directly, or PgBouncer in session mode) or "
                f"transaction (PgBouncer in transaction mode), not {value!r}"
            )
        return chosen

    @field_validator("redispatch_delays_s", mode="before")
    @classmethod
    def _split_redispatch_delays(cls, value: object) -> object:
        return comma_list(value)

    @field_validator("heartbeat_ttl_s")
    @classmethod
    def _check_heartbeat_ttl(cls, ttl: int, info: ValidationInfo) -> int:
        # A TTL under the interval let every service start, then fail its first beat with a
        # traceback (a tour set SCHEMABRIDGE_HEARTBEAT_TTL_S=3): refused at start instead.
        interval = info.data.get("heartbeat_interval_s")
        if isinstance(interval, float) and not interval < ttl:
            raise ValueError(
                f"should be more than SCHEMABRIDGE_HEARTBEAT_INTERVAL_S ({interval:g} s), not "
                f"{ttl}: a service's heartbeat would expire between its beats"
            )
        return ttl

    @field_validator("run_retention_s")
    @classmethod
    def _check_run_retention(cls, retention: float, info: ValidationInfo) -> float:
        # Payload retention empties a run's payloads (bounded in bytes per transaction) before
        # the run itself goes; a run retention below it would free them in batches bounded only
        # in runs, and the expired-join message ("raise …PAYLOAD_RETENTION_S") would mislead.
        payloads = info.data.get("payload_retention_s")
        if retention and isinstance(payloads, float) and retention < payloads:
            raise ValueError(
                f"should be 0 (keep runs for ever) or at least SCHEMABRIDGE_PAYLOAD_RETENTION_S "
                f"({payloads:g} s), not {retention:g}: a run's payloads go before the run"
            )
        return retention

    @field_validator("egress_allow")
    @classmethod
    def _check_egress_allow(cls, value: str) -> str:
        EgressPolicy.parse(value)  # every bad entry named at start, not at the first call
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: str) -> str:
        parse_trusted_proxies(value)  # refused at start, naming every bad entry
        return value

    @property
    def nesting_depth_limit(self) -> int:
        """The nesting limit in force: `max_nesting_depth`, at most `HARD_MAX_NESTING_DEPTH`.
        Every reader of JSON takes its limit from here, so one setting means the same
        everywhere."""
        return min(self.max_nesting_depth, HARD_MAX_NESTING_DEPTH)

    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        """The networks of `trusted_proxies` (empty: no proxy is trusted)."""
        return parse_trusted_proxies(self.trusted_proxies)

    def egress_policy(self) -> EgressPolicy:
        """The egress policy of `egress_allow`."""
        return EgressPolicy.parse(self.egress_allow)

    def allowing_loopback(self) -> Settings:
        """These settings with loopback added to the egress allow-list: what the demo
        downstream needs (`serve --demo`, `run --demo-downstream`), and nothing else should."""
        allow = ",".join(part for part in (self.egress_allow, LOOPBACK_ALLOW) if part)
        return self.model_copy(update={"egress_allow": allow})


def setting_env_names() -> frozenset[str]:
    """The `SCHEMABRIDGE_<NAME>` spelling of every setting."""
    names: set[str] = set()
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else ()
        names.update(c for c in choices if isinstance(c, str) and c.startswith(ENV_PREFIX))
    return frozenset(names)


SIMILAR_NAME_CUTOFF = 0.8
"""How alike (difflib's ratio, the part after the prefix) an unknown name must be to a known
one to be taken for a misspelling of it: DATABSE_URL is (0.96), LOG_LEVEL is not LOG_FORMAT."""


def unknown_env_names(names: Iterable[str], known: frozenset[str]) -> list[tuple[str, str | None]]:
    """The names among `names` (an environment's) that start with `SCHEMABRIDGE_`, in any
    case as pydantic-settings reads them, yet are none of `known` nor reserved for tests
    (`TEST_ENV_PREFIX`) nor a Kubernetes service link (`SERVICE_LINK`), each with the known
    name it is a likely misspelling of (None: like none). A misspelt setting is otherwise
    ignored in silence, and its default used."""
    stems = {name.removeprefix(ENV_PREFIX): name for name in known}
    unknown: list[tuple[str, str | None]] = []
    for name in sorted(names):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper.startswith(TEST_ENV_PREFIX) or upper in known:
            continue
        if SERVICE_LINK.fullmatch(upper):
            continue
        close = difflib.get_close_matches(
            upper.removeprefix(ENV_PREFIX), list(stems), n=1, cutoff=SIMILAR_NAME_CUTOFF
        )
        unknown.append((name, stems[close[0]] if close else None))
    return unknown
