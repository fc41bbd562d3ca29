"""The container path, checked without a Docker engine: docker-compose.yml, the Dockerfile (read by the
official BuildKit parser) and .dockerignore say what an operator's `docker compose up` relies on."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import dockerfile
import pytest
import yaml
from docker.utils.build import exclude_paths

from service.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_IMAGE = "pgvector/pgvector:pg18"
"""The tested PostgreSQL (18, as the embedded server) with pgvector; 16-17 with pgvector >= 0.8 also work."""
REFERENCE = re.compile(r"\$\{(\w+)(?::?[?-][^}]*)?\}")


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def services() -> dict[str, dict[str, Any]]:
    found = compose()["services"]
    assert isinstance(found, dict)
    return found


def example_env() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#"))
    return {name.strip(): value.strip() for name, value in pairs}


def interpolated(value: str, env: dict[str, str]) -> str:
    return REFERENCE.sub(lambda m: env[m.group(1)], value)


def test_services_and_images() -> None:
    found = services()
    assert set(found) == {"postgres", "redis", "migrate", "pgcontext"}
    assert found["postgres"]["image"] == POSTGRES_IMAGE
    # PostgreSQL 18 images keep PGDATA in /var/lib/postgresql/18/docker and refuse to start with a
    # volume on the pre-18 path /var/lib/postgresql/data.
    assert [v.split(":")[1] for v in found["postgres"]["volumes"]] == ["/var/lib/postgresql"]
    assert found["redis"]["image"].startswith("redis:")
    for name in ("migrate", "pgcontext"):  # one image, built from this repository's Dockerfile
        assert found[name]["build"] == "." and found[name]["image"] == found["pgcontext"]["image"]


def test_compose_postgres_preloads_pg_prewarm_through_the_image_entrypoint() -> None:
    # The image's entrypoint initialises PGDATA only when the command starts with "postgres"
    # (anything else it execs as is); the embedded server passes the same -c (test_embedded_prewarm).
    command = services()["postgres"]["command"]
    assert command[0] == "postgres"
    settings = dict(arg.split("=", 1) for flag, arg in zip(command[1::2], command[2::2], strict=True)
                    if flag == "-c")
    assert settings["shared_preload_libraries"].split(",") == ["pg_prewarm"]


def test_every_long_running_service_has_a_healthcheck_and_a_restart_policy() -> None:
    found = services()
    checks = {name: " ".join(found[name]["healthcheck"]["test"]) for name in ("postgres", "redis", "pgcontext")}
    assert "pg_isready" in checks["postgres"]
    assert "redis-cli ping" in checks["redis"]
    assert "/readyz" in checks["pgcontext"]
    for name in checks:
        health = found[name]["healthcheck"]
        assert {"interval", "timeout", "retries"} <= set(health), (name, health)
        assert found[name]["restart"] in {"unless-stopped", "always"}, name
    # The one-shot migration must not be restarted once it has succeeded.
    assert found["migrate"]["restart"] == "no"
    assert found["migrate"]["healthcheck"] == {"disable": True}


def test_migrate_completes_before_the_service_starts_on_healthy_servers() -> None:
    found = services()
    assert found["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert found["pgcontext"]["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }
    assert found["migrate"]["command"] == ["migrate"]
    assert found["pgcontext"]["command"] == ["serve", "--no-migrate"]


def test_the_service_gets_only_the_app_role_and_the_migration_the_owner() -> None:
    found, env = services(), example_env()
    app = {k: interpolated(v, env) for k, v in found["pgcontext"]["environment"].items()}
    migrate = {k: interpolated(v, env) for k, v in found["migrate"]["environment"].items()}
    assert "PGCONTEXT_DATABASE_URL" not in app and app["PGCONTEXT_MIGRATE_ON_START"] == "false"
    assert urlsplit(app["PGCONTEXT_APP_DATABASE_URL"]).username == "pgcontext_app"
    assert urlsplit(migrate["PGCONTEXT_DATABASE_URL"]).username == found["postgres"]["environment"]["POSTGRES_USER"]
    # The password migrate sets on pgcontext_app is the one in the service's DSN.
    assert urlsplit(app["PGCONTEXT_APP_DATABASE_URL"]).password == migrate["PGCONTEXT_APP_ROLE_PASSWORD"]

    settings = load_settings(app)  # the names are the service's own settings
    assert settings.database.url is None and settings.database.app_url == app["PGCONTEXT_APP_DATABASE_URL"]
    assert settings.redis.url == "redis://redis:6379/0"
    assert settings.server.metrics_token == env["PGCONTEXT_METRICS_TOKEN"]  # /metrics is not open


def test_secrets_come_from_the_env_file_and_none_is_written_in_the_compose_file() -> None:
    env = example_env()
    assert {"POSTGRES_PASSWORD", "PGCONTEXT_APP_ROLE_PASSWORD", "PGCONTEXT_METRICS_TOKEN"} <= set(env)
    assert all(value.startswith("change-me") for value in env.values())  # placeholders, not secrets
    text = (ROOT / "docker-compose.yml").read_text()
    assert set(REFERENCE.findall(text)) == set(env)
    for service in services().values():
        for name, value in service.get("environment", {}).items():
            if re.search(r"PASSWORD|TOKEN|SECRET|KEY", name):
                assert REFERENCE.fullmatch(value), f"{name} must come from .env"
            if "://" in value:
                password = urlsplit(value).password
                assert password is None or REFERENCE.fullmatch(password), f"{name} has a written-in password"
    # Mandatory (`:?`): compose refuses to start rather than run with an empty password.
    assert all(re.fullmatch(r"\$\{\w+:\?[^}]+\}", m.group(0)) for m in REFERENCE.finditer(text))
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()


def test_one_postgres_image_and_one_redis_image_in_compose_and_the_tests() -> None:
    servers = (ROOT / "tests" / "servers.py").read_text()
    assert re.findall(r'PostgresContainer\("([^"]+)"', servers) == [services()["postgres"]["image"]]
    assert re.findall(r'RedisContainer\("([^"]+)"', servers) == [services()["redis"]["image"]]
    assert POSTGRES_IMAGE in (ROOT / "Dockerfile").read_text()  # its comment names the supported image


def stages() -> list[list[dockerfile.Command]]:
    result: list[list[dockerfile.Command]] = []
    for command in dockerfile.parse_file(str(ROOT / "Dockerfile")):
        if command.cmd == "FROM":
            result.append([])
        result[-1].append(command)
    return result


def test_dockerfile_builds_a_wheel_and_installs_it_as_a_non_root_user() -> None:
    build, runtime = stages()
    build_runs = " ".join(c.value[0] for c in build if c.cmd == "RUN")
    assert "pip wheel" in build_runs
    runs = " ".join(c.value[0] for c in runtime if c.cmd == "RUN")
    assert "pip install" in runs and "--no-index" in runs and "--find-links /wheels" in runs
    every_run = build_runs + " " + runs
    assert not re.search(r"(^|\s)(-e|--editable)(\s|$)", every_run)
    # The runtime stage holds no source tree: only the wheels from the build stage.
    assert not [c for c in runtime if c.cmd in {"COPY", "ADD"} and "--from=build" not in c.flags]

    users = [c.value[0] for c in runtime if c.cmd == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    (health,) = [c for c in runtime if c.cmd == "HEALTHCHECK"]
    assert health.value[0] == "CMD" and "/readyz" in " ".join(health.value)
    assert [c.value for c in runtime if c.cmd == "ENTRYPOINT"] == [("pgcontext",)]


def dockerignore() -> list[str]:
    return [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def test_dockerfile_copies_what_exists_and_dockerignore_keeps_the_rest_out() -> None:
    build = stages()[0]
    copied = [src for c in build if c.cmd == "COPY" for src in c.value[:-1]]
    ignored = dockerignore()
    for src in copied:
        assert (ROOT / src).exists(), src
        assert not any(fnmatch.fnmatch(src, pattern) for pattern in ignored), src
    assert {".venv", ".pgcontext", ".git", ".env", "build", "dist"} <= set(ignored)


def build_stage_sources(target: Path) -> Path:
    """Lay out in ``target`` exactly what the build stage's COPY lines put in its image (the build
    context filtered by .dockerignore, with docker-py's matcher), and return its WORKDIR there."""
    context = exclude_paths(str(ROOT), dockerignore())
    workdir = PurePosixPath("/")
    for command in stages()[0]:
        if command.cmd == "WORKDIR":
            workdir = workdir / command.value[0]
        if command.cmd not in {"COPY", "ADD"}:
            continue
        assert command.cmd == "COPY" and not command.flags, command.original  # from the context only
        *sources, dest = command.value
        into = workdir / dest
        for source in sources:
            files = sorted(p for p in context if (p == source or p.startswith(f"{source}/")) and (ROOT / p).is_file())
            assert files, f"{command.original}: nothing in the build context matches {source}"
            for path in files:
                if (ROOT / source).is_dir():
                    inside = into / PurePosixPath(path).relative_to(source)
                else:
                    inside = into / PurePosixPath(path).name if dest.endswith("/") else into
                out = target / inside.relative_to("/")
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / path, out)
    return target / workdir.relative_to("/")


@pytest.mark.slow
def test_the_build_stage_files_build_the_wheel(tmp_path: Path) -> None:
    """``pip wheel .`` on exactly the files the Dockerfile's build stage copies (no Docker engine here:
    the same files, the same command) succeeds, and the wheel carries the SQL, the migrations and the
    client that ``pgcontext mcp`` imports."""
    runs = [c.value[0] for c in stages()[0] if c.cmd == "RUN"]
    assert any(re.search(r"pip wheel [^&]* \.(\s|$)", run) for run in runs), runs
    source = build_stage_sources(tmp_path / "image")
    built = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps",
                            "--no-build-isolation", "--wheel-dir", str(tmp_path / "wheels"), str(source)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "wheels").glob("pgcontext-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sql = {f"service/_sql/{p.relative_to(ROOT / 'sql')}" for p in (ROOT / "sql").rglob("*.sql")}
    migrations = {f"service/_migrations/{p.relative_to(ROOT / 'migrations')}"
                  for p in (ROOT / "migrations" / "versions").glob("*.py")}
    client = {f"pgcontext_client/{p.relative_to(ROOT / 'client' / 'pgcontext_client')}"
              for p in (ROOT / "client" / "pgcontext_client").rglob("*.py")}
    assert sql and migrations and client
    missing = (sql | migrations | client | {"service/_migrations/alembic.ini", "service/_migrations/env.py"}) - names
    assert not missing, sorted(missing)


def test_the_published_port_and_the_healthchecks_use_the_image_port() -> None:
    runtime = stages()[-1]
    values = next(c.value for c in runtime if c.cmd == "ENV")
    port = dict(zip(values[::2], values[1::2], strict=True))["PGCONTEXT_PORT"]
    assert [c.value for c in runtime if c.cmd == "EXPOSE"] == [(port,)]
    app = services()["pgcontext"]
    assert app["ports"] == [f"127.0.0.1:{port}:{port}"]
    assert f":{port}/readyz" in " ".join(app["healthcheck"]["test"])
