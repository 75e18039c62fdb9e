"""docker-compose.yml and docker/: the demo fleet's structure, without Docker.

The compose file is parsed as YAML and checked against the CLI it drives:
every command of the project's image (``governor ...`` or ``python -m bench
...``) must parse with the real click commands (options and values
included), ports and URLs must agree between services, and Prometheus must
scrape the exporter. Where a compose tool is
installed, it validates the file too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click
import fakeredis
import pytest

from governor import Governor, GovernorConfig
from governor import cli as cli_module
from governor.metrics import GovernorCollector

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read docker-compose.yml")

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
IMAGE = "fleet-governor:local"
GLOBAL_OPTIONS = {"--url", "--name", "-n", "--prefix", "--timeout"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(COMPOSE)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]  # type: ignore[no-any-return]


def ours(services: dict[str, Any]) -> dict[str, Any]:
    """The services that run the project's image."""
    return {name: s for name, s in services.items() if s.get("image") == IMAGE}


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def parse(command: list[str]) -> tuple[str, click.Context]:
    """Parse a command of the image with the real CLI it names (``governor ...``
    or ``python -m bench ...``), validating every option and value; returns
    the subcommand and its context."""
    if command[:3] == ["python", "-m", "bench"]:
        group: click.Group = pytest.importorskip("bench.cli").sim_group
        rest = command[3:]
    else:
        assert command[0] == "governor", f"{command}: neither `governor` nor `python -m bench`"
        group, rest = cli_module.main, command[1:]
    global_args: list[str] = []
    while rest and rest[0] in GLOBAL_OPTIONS:
        global_args += rest[:2]
        rest = rest[2:]
    assert rest, f"no subcommand in {command}"
    parent = group.make_context(command[0], [*global_args, rest[0]])
    subcommand = group.get_command(parent, rest[0])
    assert subcommand is not None, f"{rest[0]!r} is not a command of {command[0]}"
    return rest[0], subcommand.make_context(rest[0], rest[1:], parent=parent)


def test_the_fleet_is_all_there(services: dict[str, Any]) -> None:
    assert {"redis", "provider", "worker", "swarm", "exporter", "prometheus"} <= set(services)
    for name, service in services.items():
        assert "image" in service or "build" in service, name
    for name, service in ours(services).items():
        build = service["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).is_file(), name
        assert isinstance(service["command"], list) and service["command"], name
    assert services["worker"]["deploy"]["replicas"] >= 2


@pytest.mark.parametrize("service", ["provider", "worker", "swarm", "exporter", "cli"])
def test_commands_parse_with_the_real_cli(services: dict[str, Any], service: str) -> None:
    name, ctx = parse(services[service]["command"])
    assert name == {"cli": "list"}.get(service, service)
    if service == "exporter":
        assert ctx.params["all_"] is True


def test_services_agree_on_ports_urls_and_hosts(services: dict[str, Any]) -> None:
    provider = services["provider"]["command"]
    assert option(provider, "--host") == "0.0.0.0"  # reachable from the other containers
    swarm = services["swarm"]["command"]
    url = urlparse(option(swarm, "--provider-url"))
    assert (url.hostname, url.port) == ("provider", int(option(provider, "--port")))
    assert int(option(swarm, "--hosts")) == services["worker"]["deploy"]["replicas"]
    assert option(swarm, "--workers") == "external"
    for service in ("worker", "swarm"):
        assert urlparse(option(services[service]["command"], "--redis-url")).hostname == "redis"
    assert urlparse(option(services["exporter"]["command"], "--url")).hostname == "redis"
    for service in ours(services).values():
        assert urlparse(service["environment"]["GOVERNOR_REDIS_URL"]).hostname == "redis"
        needs = service.get("depends_on", {})
        if "redis" in needs:
            assert needs["redis"]["condition"] == "service_healthy"


def test_published_ports_are_loopback_and_each_overridable_by_a_documented_variable(
    services: dict[str, Any],
) -> None:
    """A newcomer's machine may already run Redis on 6379 or Prometheus on
    9090: the demo publishes elsewhere by default, each port moved by one
    variable the file's header names with its default."""
    header = COMPOSE.read_text(encoding="utf-8").split("\nx-governor")[0]
    published = {}
    for name, service in services.items():
        for mapping in service.get("ports", []):
            match = re.fullmatch(r"127\.0\.0\.1:\$\{(\w+):-(\d+)\}:(\d+)", mapping)
            assert match, f"{name} publishes {mapping!r}: not loopback, or not overridable"
            variable, default, _ = match.groups()
            assert re.search(rf"{variable}\s+.*default {default}\b", header), f"{variable} is not documented"
            published[name] = int(default)
    assert published["redis"] != 6379 and published["prometheus"] != 9090
    assert len(set(published.values())) == len(published)
    _, ctx = parse(services["exporter"]["command"])
    assert ctx.params["addr"] == "0.0.0.0"  # in its container: Prometheus scrapes it from another


def test_prometheus_scrapes_the_exporter(services: dict[str, Any]) -> None:
    port = option(services["exporter"]["command"], "--port")
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in services["prometheus"]["volumes"])
    for source in mounts:
        assert (ROOT / source).is_file(), source
    config = load(ROOT / "docker/prometheus.yml")
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert f"exporter:{port}" in targets
    for rule_file in config.get("rule_files", []):
        assert rule_file in mounts.values(), f"{rule_file} is not mounted into the container"


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard(services: dict[str, Any]) -> None:
    grafana = services["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"])
    for source in mounts:
        assert (ROOT / source).is_dir(), source
    provisioning = ROOT / next(s for s, target in mounts.items() if target == "/etc/grafana/provisioning")
    (source,) = load(provisioning / "datasources/prometheus.yml")["datasources"]
    url = urlparse(source["url"])
    assert (url.hostname, url.port) == ("prometheus", 9090) and "prometheus" in grafana["depends_on"]
    (provider,) = load(provisioning / "dashboards/fleet-governor.yml")["providers"]
    folder = provider["options"]["path"]
    dashboards = ROOT / next(s for s, target in mounts.items() if target == folder)
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(folder + "/") and (dashboards / home[len(folder) + 1 :]).is_file()
    for board in dashboards.glob("*.json"):
        panels = json.loads(board.read_text(encoding="utf-8"))["panels"]
        uids = {t["datasource"]["uid"] for p in panels for t in p["targets"]} | {p["datasource"]["uid"] for p in panels}
        assert uids == {source["uid"]}, f"{board.name} names data sources {uids}"


def test_alert_rules_use_exported_metrics() -> None:
    server = fakeredis.FakeServer()
    client = fakeredis.FakeRedis(server=server)
    gov = Governor(client, "rules", GovernorConfig(max_capacity=2))
    gov.status()
    exported = {family.name for family in GovernorCollector(client, ["rules"]).collect()}
    exported |= {f"{n}_total" for n in exported}
    gov.close()
    rules = load(ROOT / "docker/governor-rules.yml")
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert alerts
    for rule in alerts:
        assert rule["alert"] and rule["annotations"]["summary"]
        used = set(re.findall(r"\bgovernor_[a-z_]+\b", rule["expr"]))
        assert used and used <= exported, f"{rule['alert']}: unknown {used - exported}"


def test_the_image_installs_the_extras_the_services_need() -> None:
    dockerfile = (ROOT / "docker/Dockerfile").read_text(encoding="utf-8")
    extras = set(re.search(r'pip install "\.\[([a-z,]+)\]"', dockerfile).group(1).split(","))  # type: ignore[union-attr]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert {"bench", "metrics"} <= extras <= set(declared["optional-dependencies"])
    assert declared["scripts"]["governor"] == "governor.cli:main"
    assert "ENTRYPOINT" not in dockerfile and re.search(r"^WORKDIR /src$", dockerfile, re.M)  # bench/ is there
    for source in re.findall(r"^COPY (\S+)", dockerfile, re.M):
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    ignore = (ROOT / "docker/Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    assert ignore[ignore.index("*") :].count("*") == 1
    assert {"!governor", "!lua", "!bench"} <= set(ignore)


def compose_tool() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_a_compose_tool_accepts_the_file() -> None:
    tool = compose_tool()
    if tool is None:
        pytest.skip("no compose tool installed (docker compose or docker-compose)")
    done = subprocess.run(
        [*tool, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr


def test_the_source_archive_holds_what_the_compose_file_needs(tmp_path: Path) -> None:
    """An sdist that ships docker-compose.yml ships what it builds and mounts:
    the Dockerfile, its ignore file, what the Dockerfile copies, the
    Prometheus files."""
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (archive,) = tmp_path.glob("fleet_governor-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    if "docker-compose.yml" not in names:
        return  # nothing to be complete for
    compose = load(COMPOSE)
    needed = {"docker/Dockerfile.dockerignore"}
    for service in compose["services"].values():
        if "build" in service:
            needed.add(str(Path(service["build"]["dockerfile"])))
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                needed.add(source[2:])
    dockerfile = (ROOT / "docker/Dockerfile").read_text(encoding="utf-8")
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            needed.update(line.split()[1:-1])
    for path in sorted(needed):
        assert path in names or any(n.startswith(path.rstrip("/") + "/") for n in names), f"{path} is not in the sdist"
