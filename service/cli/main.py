"""The pgcontext command: serve, migrate, orgs, keys, config, import, export, restore, maintain, mcp."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import unicodedata
from collections.abc import Callable

import asyncpg
import sqlalchemy.exc
from alembic.util.exc import CommandError as AlembicError

from service.auth import admin
from service.cli import importing, orgs_delete, servers, transfer
from service.cli.config_reference import unknown_variables
from service.cli.serve import ListenError, check_listen_address, cmd_serve
from service.cli.uvicorn_logs import uvicorn_log_config
from service.db import guard
from service.db import migrate as migrations
from service.logs import configure as configure_logs
from service.settings import Settings, SettingsError, load_settings


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    with servers.owner_dsn(settings) as dsn:
        before = asyncio.run(guard.recorded_revision(dsn))
        if args.downgrade:
            migrations.downgrade(dsn, args.downgrade)
        else:
            migrations.upgrade(dsn, args.revision)
            if settings.database.app_role_password:
                # A deployment whose service holds only pgcontext_app's DSN (docker-compose.yml's
                # one-shot migrate, then `serve --no-migrate`) sets that role's password here.
                asyncio.run(migrations.set_app_password(dsn, settings.database.app_role_password))
        print(migrations.change_line(before, asyncio.run(guard.recorded_revision(dsn)), migrations.heads()))
    return 0


def _bad_label(text: str) -> bool:
    """Not a name to list in a table: empty, over 200 characters, spaces around it, or a control, format
    or line-separator character in it."""
    return (not 1 <= len(text.strip()) <= 200 or text != text.strip()
            or any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text))


def cmd_orgs_create(settings: Settings, args: argparse.Namespace) -> int:
    if _bad_label(args.name):
        print("error: an org's name is 1-200 characters on one line, without leading or trailing spaces or "
              "control characters", file=sys.stderr)
        return 2
    with servers.owner_dsn(settings) as dsn:
        migrations.upgrade(dsn)

        async def run(conn: asyncpg.Connection) -> object:
            return await admin.create_org(conn, args.name)

        print(asyncio.run(servers.with_owner(dsn, run)))
    return 0


def cmd_keys_create(settings: Settings, args: argparse.Namespace) -> int:
    if args.name is not None and _bad_label(args.name):
        print("error: a key's --name is 1-200 characters on one line, without leading or trailing spaces or "
              "control characters", file=sys.stderr)
        return 2
    with servers.owner_dsn(settings) as dsn:
        migrations.upgrade(dsn)

        async def run(conn: asyncpg.Connection) -> object:
            return await admin.create_key(conn, args.org, args.name)

        issued = asyncio.run(servers.with_owner(dsn, run))
        assert isinstance(issued, admin.IssuedKey)
        print(f"key id {issued.key_id} for org {args.org} ({issued.org_id}); the key is shown once:")
        print(issued.key)
    return 0


def cmd_keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    with servers.owner_dsn(settings) as dsn:

        async def run(conn: asyncpg.Connection) -> object:
            return await admin.revoke_key(conn, args.key)

        print(f"revoked key {asyncio.run(servers.with_owner(dsn, run))}")
    return 0


def _owner_report(settings: Settings, action: object) -> object:
    """Run a read-only owner query (no migration: a report must not change the schema)."""
    with servers.owner_dsn(settings) as dsn:
        return asyncio.run(servers.with_owner(dsn, action))


def cmd_orgs_list(settings: Settings, args: argparse.Namespace) -> int:
    from service.cli import ops

    orgs = _owner_report(settings, ops.list_orgs)
    assert isinstance(orgs, list)
    if args.json:
        print(json.dumps([{**dataclasses.asdict(o), "id": str(o.id), "created_at": ops.stamp(o.created_at)}
                          for o in orgs], indent=2))
        return 0
    header = ("NAME", "ID", "CREATED", "KEYS", "REVOKED", "MEMORIES", "DOC_CHUNKS")
    print(ops.format_table(header, [(o.name, str(o.id), ops.stamp(o.created_at), str(o.active_keys),
                                     str(o.revoked_keys), str(o.memories), str(o.document_chunks)) for o in orgs]))
    return 0


def cmd_keys_list(settings: Settings, args: argparse.Namespace) -> int:
    from service.cli import ops

    async def run(conn: asyncpg.Connection) -> object:
        return await ops.list_keys(conn, args.org)

    keys = _owner_report(settings, run)
    assert isinstance(keys, list)
    if args.json:
        print(json.dumps([{"id": str(k.id), "prefix": k.prefix, "name": k.name, "created_at": ops.stamp(k.created_at),
                           "last_used_at": ops.stamp(k.last_used_at) or None,
                           "revoked_at": ops.stamp(k.revoked_at) or None} for k in keys], indent=2))
        return 0
    header = ("KEY_ID", "PREFIX", "LABEL", "CREATED", "LAST_USED", "REVOKED")
    print(ops.format_table(header, [(str(k.id), f"{k.prefix}…", k.name or "", ops.stamp(k.created_at),
                                     ops.stamp(k.last_used_at) or "never", ops.stamp(k.revoked_at) or "no")
                                    for k in keys]))
    return 0


def cmd_config(settings: Settings, args: argparse.Namespace) -> int:
    from service.cli import ops

    lines = ops.effective_config(settings, os.environ)
    if args.json:
        print(json.dumps([dataclasses.asdict(line) for line in lines], indent=2))
    else:
        print(ops.format_config(lines))
    return 0


def cmd_maintain(settings: Settings, args: argparse.Namespace) -> int:
    from service.retrieval import maintenance

    with servers.owner_dsn(settings) as dsn:
        migrations.upgrade(dsn)

        async def run(conn: asyncpg.Connection) -> object:
            return await maintenance.maintain(conn, threshold=args.threshold, drop_ratio=args.drop_ratio,
                                              dry_run=args.dry_run, maintenance_work_mem=args.maintenance_work_mem)

        actions = asyncio.run(servers.with_owner(dsn, run))
        assert isinstance(actions, list)
        for action in actions:
            print(f"{'would ' if args.dry_run else ''}{action}")
        if not actions:
            print("nothing to do")
    return 0


def cmd_mcp(settings: Settings, args: argparse.Namespace) -> int:
    from service.mcp import McpConfig, http_app, run_stdio
    from service.mcp.server import MAX_CLIENTS
    from service.memories.types import AGENT_ID_RULE, is_agent_id

    url = args.url or os.environ.get("PGCONTEXT_URL") or f"http://{settings.server.host}:{settings.server.port}"
    key = args.key or os.environ.get("PGCONTEXT_API_KEY")
    agent = args.agent_id or os.environ.get("PGCONTEXT_AGENT_ID")
    if not agent:
        print("error: an agent id is required (--agent-id or PGCONTEXT_AGENT_ID)", file=sys.stderr)
        return 2
    if not is_agent_id(agent):
        print(f"error: the agent id {agent!r} is not valid: {AGENT_ID_RULE}", file=sys.stderr)
        return 2
    if not args.http and not key:
        print("error: an API key is required (--key or PGCONTEXT_API_KEY)", file=sys.stderr)
        return 2
    budget = args.max_context_tokens or _env_count("PGCONTEXT_MCP_MAX_CONTEXT_TOKENS", None)
    config = McpConfig(url=url, agent_id=agent, api_key=key, model=args.model or os.environ.get(
        "PGCONTEXT_MCP_MODEL", "gpt-4o"), max_context_tokens=budget,
        max_clients=_env_count("PGCONTEXT_MCP_MAX_CLIENTS", MAX_CLIENTS) or MAX_CLIENTS)
    if not args.http:
        run_stdio(config)  # stdout is the protocol: nothing else may print there
        return 0
    import uvicorn

    check_listen_address(args.host, args.port)
    print(f"pgcontext MCP (streamable HTTP) on http://{args.host}:{args.port}/mcp for agent {agent!r}, "
          f"service {url}; clients send 'Authorization: Bearer <API key>'", flush=True)
    uvicorn.run(http_app(config, host=args.host), host=args.host, port=args.port, access_log=False,
                log_config=uvicorn_log_config(settings.server.log_level), log_level=settings.server.log_level)
    return 0


def _at_least(minimum: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number from ``minimum`` (to ``most``)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum or (most is not None and value > most):
            span = f"from {minimum}" + (f" to {most}" if most is not None else "")
            raise argparse.ArgumentTypeError(f"{value} is out of range: {span}")
        return value
    return parse


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is out of range: from 0 to 1")
    return value


_PORT = _at_least(1, 65535)
_COUNT = _at_least(1)


def _env_count(name: str, default: int | None) -> int | None:
    """A positive whole number from the environment (``default`` when unset)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return _COUNT(raw)
    except argparse.ArgumentTypeError as exc:
        raise SettingsError(f"{name}: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pgcontext", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the HTTP service (embedded Postgres + Redis unless configured)")
    serve.add_argument("--host", default=None, help="listen address (default: $PGCONTEXT_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=_PORT, default=None, help="listen port (default: $PGCONTEXT_PORT or 8080)")
    serve.add_argument("--workers", type=_COUNT, default=None,
                       help="service processes (default: $PGCONTEXT_WORKERS or 1)")
    serve.add_argument("--no-migrate", action="store_true",
                       help="do not migrate; refuse to start unless the schema is at head "
                            "(with PGCONTEXT_APP_DATABASE_URL alone: no owner DSN needed)")
    serve.set_defaults(func=cmd_serve)

    mig = sub.add_parser("migrate", help="apply Alembic migrations (as the owner role)")
    mig.add_argument("--revision", default="head", help="upgrade to REVISION (default: head, the newest)")
    mig.add_argument("--downgrade", metavar="REVISION", default=None, help="downgrade to REVISION (e.g. base)")
    mig.set_defaults(func=cmd_migrate)

    orgs = sub.add_parser("orgs", help="manage orgs").add_subparsers(dest="orgs_command", required=True)
    create_org = orgs.add_parser("create", help="create an org and print its id")
    create_org.add_argument("name")
    create_org.set_defaults(func=cmd_orgs_create)
    list_orgs = orgs.add_parser("list", help="every org: name, id, created, key and memory counts")
    list_orgs.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    list_orgs.set_defaults(func=cmd_orgs_list)
    delete_org = orgs.add_parser("delete", help="delete an org and everything it holds (keys revoked first; "
                                                "without --yes only says what it holds)")
    delete_org.add_argument("name")
    delete_org.add_argument("--yes", action="store_true", help="really delete it")
    delete_org.set_defaults(func=orgs_delete.cmd_orgs_delete)

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    create_key = keys.add_parser("create", help="create a key; the key is the last line of stdout")
    create_key.add_argument("--org", required=True, help="org name")
    create_key.add_argument("--name", default=None, help="a label for the key")
    create_key.set_defaults(func=cmd_keys_create)
    revoke = keys.add_parser("revoke", help="revoke a key: the key itself, its key id, or its prefix")
    revoke.add_argument("key", metavar="KEY|KEY_ID|PREFIX",
                        help="the key itself, its key id, or the prefix `keys list` shows (e.g. pgc_AbC123…, "
                             "with or without the …); a prefix that several active keys share (in any org) is "
                             "refused: use the key id then")
    revoke.set_defaults(func=cmd_keys_revoke)
    list_keys = keys.add_parser("list", help="an org's keys: id, prefix, label, created, last used, revoked "
                                             "(never the key or its hash)")
    list_keys.add_argument("--org", required=True, help="org name")
    list_keys.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    list_keys.set_defaults(func=cmd_keys_list)

    cfg = sub.add_parser("config", help="print the effective configuration from the environment (secrets masked)")
    cfg.add_argument("--json", action="store_true", help="a JSON array instead of VAR=value lines")
    cfg.set_defaults(func=cmd_config)

    imp = sub.add_parser("import", help="mirror a directory into a document collection (only changed files are sent)")
    imp.add_argument("path", help="directory to import (.gitignore honoured; version-control metadata, ignore "
                                   "lists, binary and huge files skipped)")
    imp.add_argument("--url", default=None, help="service URL (default: $PGCONTEXT_URL or http://HOST:PORT)")
    imp.add_argument("--key", default=None, help="API key (default: $PGCONTEXT_API_KEY)")
    imp.add_argument("--collection", default="default",
                     help="collection to mirror PATH into; its files missing from PATH are deleted")
    imp.add_argument("--agent-id", default=None, help="owner agent of the chunks (default: org-wide)")
    imp.add_argument("--batch-files", type=_COUNT, default=64, help="files per request")
    imp.add_argument("--batch-bytes", type=_COUNT, default=2_000_000, help="content bytes per request")
    imp.add_argument("--no-delete", action="store_true", help="keep server files that are missing locally")
    imp.add_argument("--quiet", action="store_true", help="no progress bar")
    imp.add_argument("--include-vcs", action="store_true",
                     help="also import version-control metadata and ignore lists (.gitignore, .hg/, ...)")
    imp.set_defaults(func=importing.cmd_import)

    exp = sub.add_parser("export", help="save your org's export (or one agent's) as NDJSON (GET /v1/export)")
    exp.add_argument("--agent-id", default=None, help="only this agent (default: the whole org)")
    exp.add_argument("--out", default=None, help="file to write (default: stdout)")
    exp.add_argument("--url", default=None, help="service URL (default: $PGCONTEXT_URL or http://HOST:PORT)")
    exp.add_argument("--key", default=None, help="API key (default: $PGCONTEXT_API_KEY)")
    exp.set_defaults(func=transfer.cmd_export)

    res = sub.add_parser("restore", help="write a saved export into the key's org (POST /v1/import; resumable)")
    res.add_argument("file", help="an NDJSON export saved by `pgcontext export` or GET /v1/export")
    res.add_argument("--url", default=None, help="service URL (default: $PGCONTEXT_URL or http://HOST:PORT)")
    res.add_argument("--key", default=None, help="API key of the org to restore into (default: $PGCONTEXT_API_KEY)")
    res.add_argument("--batch", type=_at_least(1, 256), default=200,
                     help="memory lines per request (1-256: the service takes 256)")
    res.add_argument("--quiet", action="store_true", help="no progress bar")
    res.set_defaults(func=transfer.cmd_restore)

    from service.retrieval.maintenance import DEFAULT_DROP_RATIO, DEFAULT_THRESHOLD

    maint = sub.add_parser("maintain", help="create/drop per-org partial HNSW indexes for big orgs (as the owner)")
    maint.add_argument("--threshold", type=_COUNT, default=DEFAULT_THRESHOLD,
                       help=f"memories at which an org gets its own HNSW index (default {DEFAULT_THRESHOLD})")
    maint.add_argument("--drop-ratio", type=_ratio, default=DEFAULT_DROP_RATIO,
                       help="drop an org's index when it falls below threshold x this (default 0.5)")
    maint.add_argument("--maintenance-work-mem", default="1GB", help="for the index builds (default 1GB)")
    maint.add_argument("--dry-run", action="store_true", help="print the actions, change nothing")
    maint.set_defaults(func=cmd_maintain)

    mcp = sub.add_parser("mcp", help="MCP server for an agent's memory (stdio; --http: streamable HTTP at /mcp)")
    mcp.add_argument("--url", default=None, help="service URL (default: $PGCONTEXT_URL or http://HOST:PORT)")
    mcp.add_argument("--key", default=None, help="API key for stdio (default: $PGCONTEXT_API_KEY); "
                                                 "over HTTP each client's bearer token is its key")
    mcp.add_argument("--agent-id", default=None, help="whose memory the tools use (default: $PGCONTEXT_AGENT_ID)")
    mcp.add_argument("--model", default=None, help="tokenizer for assemble_context's budget "
                                                   "(default: $PGCONTEXT_MCP_MODEL or gpt-4o)")
    mcp.add_argument("--max-context-tokens", type=_COUNT, default=None,
                     help="assemble_context's default budget (default: $PGCONTEXT_MCP_MAX_CONTEXT_TOKENS, "
                          "else selective mode)")
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="--http: listen address")
    mcp.add_argument("--port", type=_PORT, default=8090, help="--http: listen port (default 8090)")
    mcp.set_defaults(func=cmd_mcp)
    return parser


def _first_line(error: BaseException | None) -> str:
    """A driver's error in one line (psycopg's run on with the server's hints)."""
    return (str(error).strip().splitlines() or ["(no detail)"])[0]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logs(settings.server.log_level)
    for warning in unknown_variables(os.environ):
        print(warning, file=sys.stderr)
    try:
        return int(args.func(settings, args))
    except (admin.AdminError, guard.SchemaNotCurrent, ListenError, SettingsError, AlembicError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except asyncpg.PostgresError as exc:
        print(f"error: the database refused it: {exc}", file=sys.stderr)
        return 2
    except sqlalchemy.exc.OperationalError as exc:  # the migrations' connection (psycopg): no server there
        print(f"error: cannot connect: {_first_line(exc.orig)}", file=sys.stderr)
        return 2
    except sqlalchemy.exc.DBAPIError as exc:
        print(f"error: the database refused it: {_first_line(exc.orig)}", file=sys.stderr)
        return 2
    except asyncpg.InterfaceError as exc:  # e.g. a DSN that is not one
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:  # a server that does not answer
        print(f"error: cannot connect: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an unknown host, a file that cannot be read, ...
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
