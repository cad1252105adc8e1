"""The durable floor's tables and statements (bench/durable_floor.py): asyncpg, one schema.

Every statement takes the schema's name once, through `Statements(schema)`; nothing here is
SchemaBridge's store. What the rows guarantee:

* a child per item: UNIQUE (parent_id, idx) and `ON CONFLICT DO NOTHING`, so a spawn done
  twice (its spawner's lease ran out and another worker took it over) creates only what is
  missing;
* a claim is atomic: `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT k)`, with
  a token (one per claim batch) and a lease;
* a result is written only under the claim that holds the child (`claim_token` matches and the
  child is still RUNNING), in the statement that adds it to its parent's join counters: a late
  result of an expired claim matches no row and counts for nothing;
* the merge is written once: `WHERE merged_at IS NULL AND succeeded + failed = total`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def ddl(schema: str) -> str:
    """The schema and its two tables. One partial index serves the claim (READY children by
    id, the order they were spawned in); a full index on status would be written by every
    claim and result."""
    Statements(schema)  # validates the name, as `drop` does: it is written into the SQL
    return f"""
    CREATE SCHEMA {schema};
    CREATE TABLE {schema}.parent (
        id bigint PRIMARY KEY,
        status text NOT NULL,
        total integer NOT NULL,
        succeeded integer NOT NULL DEFAULT 0,
        failed integer NOT NULL DEFAULT 0,
        input json NOT NULL,
        spawn_token bigint,
        spawn_lease_expires_at timestamptz,
        output json,
        merges integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        merged_at timestamptz
    );
    CREATE TABLE {schema}.child (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        parent_id bigint NOT NULL,
        idx integer NOT NULL,
        idem_key text NOT NULL,
        item json NOT NULL,
        status text NOT NULL,
        attempts integer NOT NULL DEFAULT 0,
        claim_token bigint,
        lease_expires_at timestamptz,
        output json,
        ended_at timestamptz,
        UNIQUE (parent_id, idx)
    );
    CREATE INDEX child_ready ON {schema}.child (id) WHERE status = 'READY';
    """


@dataclass(frozen=True)
class Statements:
    """The floor's statements on one schema (validated: it is written into the SQL)."""

    schema: str

    def __post_init__(self) -> None:
        if not SCHEMA_NAME.match(self.schema):
            raise ValueError(f"schema {self.schema!r}: use lower-case letters, digits and _")

    @property
    def submit(self) -> str:
        """$1 parent id, $2 total, $3 input (JSON text with `items`)."""
        return (
            f"INSERT INTO {self.schema}.parent (id, status, total, input)"
            " VALUES ($1, 'SPAWNING', $2, $3)"
        )

    @property
    def claim_spawn(self) -> str:
        """Take one parent's spawn ($1 token, $2 lease s): one not taken yet, or whose
        spawner's lease ran out (it died mid-spawn). Returns its id and input."""
        s = self.schema
        return f"""
        UPDATE {s}.parent AS p
        SET spawn_token = $1, spawn_lease_expires_at = now() + make_interval(secs => $2)
        WHERE p.id = (
            SELECT id FROM {s}.parent
            WHERE status = 'SPAWNING'
              AND (spawn_lease_expires_at IS NULL OR spawn_lease_expires_at < now())
            LIMIT 1 FOR UPDATE SKIP LOCKED
        )
        RETURNING p.id, p.input
        """

    @property
    def spawn_batch(self) -> str:
        """Insert a batch of children ($1 parent, $2 indexes, $3 items as JSON text) while $4
        still holds the spawn. Each child's Idempotency-Key is derived from its identity, so
        every attempt of it sends the same one."""
        s = self.schema
        return f"""
        INSERT INTO {s}.child (parent_id, idx, idem_key, item, status)
        SELECT $1::bigint, u.i, 'fl-' || $1::bigint || '-' || u.i, u.item, 'READY'
        FROM unnest($2::integer[], $3::json[]) AS u(i, item)
        WHERE EXISTS (SELECT 1 FROM {s}.parent WHERE id = $1 AND spawn_token = $4)
        ON CONFLICT (parent_id, idx) DO NOTHING
        """

    @property
    def spawn_done(self) -> str:
        """$1 parent, $2 spawn token."""
        return (
            f"UPDATE {self.schema}.parent SET status = 'RUNNING', spawn_token = NULL,"
            " spawn_lease_expires_at = NULL"
            " WHERE id = $1 AND spawn_token = $2 AND status = 'SPAWNING'"
        )

    @property
    def exchange(self) -> str:
        """A worker's one statement per cycle: record the results it holds and claim the next
        children, in autocommit (one round trip, one commit).

        Results: $1 ids, $2 their claim tokens, $3 statuses, $4 outputs (JSON text); written
        only where the claim still holds, and added to the parents' join counters in the same
        statement. Claim: up to $7 READY children, oldest first, under token $5 for $6 s.
        Returns one row: how many results were recorded, the parents whose join this closed,
        and the claimed children's ids, Idempotency-Keys and items (arrays).

        The parts touch disjoint rows (RUNNING children of this worker's claims, READY
        children), and the claim skips locked rows, so two workers' exchanges never wait on
        each other but for the parent's row, which every one that records takes last."""
        s = self.schema
        return f"""
        WITH rec AS (
            UPDATE {s}.child AS c
            SET status = r.status, output = r.output, claim_token = NULL,
                lease_expires_at = NULL, ended_at = now()
            FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::json[])
                AS r(id, token, status, output)
            WHERE c.id = r.id AND c.claim_token = r.token AND c.status = 'RUNNING'
            RETURNING c.parent_id, c.status
        ), joined AS (
            UPDATE {s}.parent AS p
            SET succeeded = p.succeeded + d.ok, failed = p.failed + d.bad
            FROM (
                SELECT parent_id,
                       count(*) FILTER (WHERE status = 'SUCCEEDED') AS ok,
                       count(*) FILTER (WHERE status <> 'SUCCEEDED') AS bad
                FROM rec GROUP BY parent_id
            ) AS d
            WHERE p.id = d.parent_id
            RETURNING p.id, p.succeeded + p.failed = p.total AS closed
        ), claimed AS (
            UPDATE {s}.child AS c
            SET status = 'RUNNING', claim_token = $5,
                lease_expires_at = now() + make_interval(secs => $6), attempts = c.attempts + 1
            WHERE c.id IN (
                SELECT id FROM {s}.child WHERE status = 'READY'
                ORDER BY id LIMIT $7 FOR UPDATE SKIP LOCKED
            )
            RETURNING c.id, c.idem_key, c.item
        )
        SELECT (SELECT count(*) FROM rec) AS recorded,
               (SELECT array_agg(id) FROM joined WHERE closed) AS closed,
               array_agg(claimed.id) AS ids,
               array_agg(claimed.idem_key) AS keys,
               array_agg(claimed.item) AS items
        FROM claimed
        """

    @property
    def merge(self) -> str:
        """Record parent $1's merge once its join is closed, at most once (`merges` counts the
        writes, so a check can see it is 1). The outputs in item order, as the database holds
        them (a failed child contributes its error record)."""
        s = self.schema
        return f"""
        UPDATE {s}.parent AS p
        SET status = CASE WHEN p.failed = 0 THEN 'SUCCEEDED' ELSE 'FAILED' END,
            merges = p.merges + 1, merged_at = clock_timestamp(),
            output = (
                SELECT json_build_object(
                    'counts', json_build_object('succeeded', p.succeeded, 'failed', p.failed),
                    'outputs', coalesce(json_agg(c.output ORDER BY c.idx), '[]'::json))
                FROM {s}.child AS c WHERE c.parent_id = p.id
            )
        WHERE p.id = $1 AND p.merged_at IS NULL AND p.succeeded + p.failed = p.total
        RETURNING p.id
        """

    @property
    def unmerged(self) -> str:
        """Parents whose join closed but whose merge is not written (its worker died between
        the two statements): any idle worker merges them."""
        return (
            f"SELECT id FROM {self.schema}.parent"
            " WHERE merged_at IS NULL AND succeeded + failed = total"
        )

    @property
    def renew(self) -> str:
        """Extend the leases of claims still held ($1 ids, $2 tokens, $3 lease s). Rows locked
        right now are being recorded by their owner and skipped, so renewal never waits."""
        s = self.schema
        return f"""
        UPDATE {s}.child AS c SET lease_expires_at = now() + make_interval(secs => $3)
        WHERE c.id IN (
            SELECT c2.id FROM {s}.child AS c2
            JOIN unnest($1::bigint[], $2::bigint[]) AS h(id, token)
              ON c2.id = h.id AND c2.claim_token = h.token
            WHERE c2.status = 'RUNNING'
            FOR UPDATE OF c2 SKIP LOCKED
        )
        """

    @property
    def renew_spawn(self) -> str:
        """$1 parent, $2 spawn token, $3 lease s."""
        return (
            f"UPDATE {self.schema}.parent"
            " SET spawn_lease_expires_at = now() + make_interval(secs => $3)"
            " WHERE id = $1 AND spawn_token = $2 AND status = 'SPAWNING'"
        )

    @property
    def requeue_expired(self) -> str:
        """Children whose claim's lease ran out (their worker died or stalled) become READY;
        their next claim counts another attempt. A scan of RUNNING rows: the floor keeps no
        index for it (SchemaBridge's reaper has the same job)."""
        s = self.schema
        return f"""
        UPDATE {s}.child SET status = 'READY', claim_token = NULL, lease_expires_at = NULL
        WHERE id IN (
            SELECT id FROM {s}.child
            WHERE status = 'RUNNING' AND lease_expires_at < now()
            FOR UPDATE SKIP LOCKED
        )
        """

    @property
    def merged(self) -> str:
        """$1 parent: whether its merge is written (the driver polls this)."""
        return f"SELECT merged_at IS NOT NULL FROM {self.schema}.parent WHERE id = $1"

    @property
    def check_children(self) -> str:
        """$1 parent: what the correctness check reads of its children."""
        return f"""
        SELECT count(*) AS rows, count(DISTINCT idx) AS items,
               count(DISTINCT idem_key) AS keys,
               count(*) FILTER (WHERE status = 'SUCCEEDED') AS succeeded,
               count(*) FILTER (WHERE output IS NULL) AS without_output,
               coalesce(max(attempts), 0) AS max_attempts,
               coalesce(sum(attempts), 0) AS attempts
        FROM {self.schema}.child WHERE parent_id = $1
        """

    @property
    def check_parent(self) -> str:
        """$1 parent: its counters, status, merge count and merged outputs."""
        return f"""
        SELECT total, succeeded, failed, status, merges,
               json_array_length(output -> 'outputs') AS outputs,
               extract(epoch FROM merged_at - created_at) AS store_wall_s
        FROM {self.schema}.parent WHERE id = $1
        """

    @property
    def keys(self) -> str:
        """$1 parent: every child's Idempotency-Key."""
        return f"SELECT idem_key FROM {self.schema}.child WHERE parent_id = $1"


def drop(schema: str) -> str:
    Statements(schema)  # validates the name
    return f"DROP SCHEMA IF EXISTS {schema} CASCADE"
