"""The Node client ships what the Python package owns: the very same
Functions library text (same bytes, same content hash) and the protocol's
facts (src/generated.ts), both written by scripts/ts_sync.py. And what
`npm pack` makes of it installs in a fresh project, offline, where its
README's examples run as written, by `import` and by `require`."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from governor import Governor, GovernorConfig, Outcome, scripts
from tests.support.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"


def test_the_node_package_ships_the_same_library_bytes() -> None:
    shipped = (PACKAGE / "library.lua").read_bytes()
    ours = scripts.library().encode("utf-8")
    assert hashlib.sha256(shipped).hexdigest() == hashlib.sha256(ours).hexdigest(), (
        "clients/typescript/library.lua differs from governor.scripts.library(): run `python scripts/ts_sync.py`"
    )
    assert shipped.startswith(f"#!lua name={scripts.library_name()}\n".encode())


def test_the_generated_facts_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ts_sync.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert f'LIBRARY_NAME = "{scripts.library_name()}"' in (PACKAGE / "src" / "generated.ts").read_text()


README = PACKAGE / "README.md"
BUILT = (PACKAGE / "dist" / "src" / "index.js", PACKAGE / "dist" / "cjs" / "index.js")


def _run(args: list[str], cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, f"{' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def built() -> Path:
    """The package built (tsc, then the CommonJS build) when its output is
    older than a source; never cleaned: other tests may be running the
    compiled workers meanwhile."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not on PATH: the Node client's tests need Node 20+")
    if not (PACKAGE / "node_modules").is_dir():
        pytest.skip("the Node package's dependencies are not installed: run `npm ci` in clients/typescript")
    sources = [*PACKAGE.glob("src/**/*.ts"), PACKAGE / "scripts" / "build-cjs.mjs", PACKAGE / "tsconfig.json"]
    newest = max(path.stat().st_mtime for path in sources)
    if not all(out.exists() and out.stat().st_mtime >= newest for out in BUILT):
        _run(["npx", "tsc", "-p", "tsconfig.json"], PACKAGE)
        _run(["node", "scripts/build-cjs.mjs"], PACKAGE)
    return BUILT[0]


@pytest.fixture(scope="module")
def tarballs(built: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The package's `npm pack` tarball and one of each of its production
    dependencies (packed from its node_modules, so a fresh project installs
    them offline)."""
    out = tmp_path_factory.mktemp("packs")
    packed = json.loads(_run(["npm", "pack", "--json", "--ignore-scripts", "--pack-destination", str(out)], PACKAGE))
    files = {entry["path"] for entry in packed[0]["files"]}
    assert {"dist/src/index.js", "dist/cjs/index.js", "dist/cjs/index.d.ts", "library.lua", "README.md"} <= files
    assert not any(path.startswith(("src/", "test/", "dist/test/")) for path in files), sorted(files)
    deps = _run(["npm", "ls", "--omit=dev", "--all", "--parseable"], PACKAGE).split()[1:]
    assert any(dep.endswith("/ioredis") for dep in deps), deps
    (out / "deps").mkdir()
    for dep in deps:
        _run(["npm", "pack", "--ignore-scripts", "--pack-destination", str(out / "deps"), dep], PACKAGE)
    return [out / packed[0]["filename"], *sorted((out / "deps").glob("*.tgz"))]


@pytest.fixture(scope="module")
def project(tarballs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh project as `npm init -y` makes it (CommonJS), the tarball installed in it offline."""
    project = tmp_path_factory.mktemp("app")
    _run(["npm", "init", "-y"], project)
    assert json.loads((project / "package.json").read_text()).get("type", "commonjs") == "commonjs"
    _run(["npm", "install", "--offline", "--no-audit", "--no-fund", *map(str, tarballs)], project)
    return project


def test_the_packed_package_runs_its_readme_in_a_fresh_npm_project(project: Path, private_redis: RedisServer) -> None:
    examples = re.findall(r"```(js|cjs)\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert {kind for kind, _ in examples} == {"js", "cjs"}, "the README shows an ES module and a CommonJS example"
    env = {**os.environ, "REDIS_URL": private_redis.url}
    outputs = []
    for n, (kind, code) in enumerate(examples):
        script = project / f"example-{n}.{'cjs' if kind == 'cjs' else 'mjs'}"
        script.write_text(code, encoding="utf-8")
        result = subprocess.run(["node", script.name], cwd=project, capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, f"{script.name}:\n{code}\n{result.stdout}{result.stderr}"
        assert result.stderr == "", f"{script.name} printed on stderr: {result.stderr}"
        outputs.append(result.stdout)
    assert any("0 in flight" in out for out in outputs), outputs
    assert any(
        'governor "readme-nowhere": Redis at 127.0.0.1:1 is unreachable (connect ECONNREFUSED 127.0.0.1:1)' in out
        for out in outputs
    ), outputs


def test_the_packed_types_hold_for_import_and_require(project: Path) -> None:
    check = """import { Governor, Outcome, type Status } from "fleet-governor";
const gov = Governor.fromUrl("redis://localhost:6379", "typed");
export async function look(): Promise<[number, boolean, number | null]> {
  const s: Status = await gov.status();
  // @ts-expect-error: the protocol's snake_case names are not the Status's
  void s.in_flight;
  await gov.report(Outcome.RATE_LIMITED, { retryAfter: 1 });
  await gov.report("SUCCESS");
  return [s.inFlight, s.paused, s.notBefore];
}
"""
    (project / "esm.mts").write_text(check)
    (project / "cjs.cts").write_text(check)
    types = PACKAGE / "node_modules" / "@types"
    tsc = PACKAGE / "node_modules" / ".bin" / "tsc"
    _run(
        [
            str(tsc),
            "--noEmit",
            "--strict",
            "--skipLibCheck",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "--types",
            "node",
            "--typeRoots",
            str(types),
            "esm.mts",
            "cjs.cts",
        ],
        project,
    )


NODE_STATUS = """
const { Governor } = await import(process.argv[1]);
const gov = Governor.fromUrl(process.env.REDIS_URL, process.argv[2]);
const s = await gov.status();
const derived = { rateLimitedShare: s.rateLimitedShare, holding: s.holding, recoveryHold: s.recoveryHold };
console.log(JSON.stringify({ ...s, ...derived }));
await gov.close();
"""


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def test_node_status_has_the_python_status_fields_camel_cased_in_the_same_units(
    built: Path, private_redis: RedisServer
) -> None:
    name = "status-both"
    config = GovernorConfig(max_capacity=5, tokens_per_minute=6000, window=12.5)
    with Governor.from_url(private_redis.url, name, config) as gov:
        with gov.acquire(timeout=10) as lease:
            gov.report(Outcome.RATE_LIMITED, retry_after=30, lease=lease)
        gov.pause("maintenance", 60)
        ours = gov.status()
    result = subprocess.run(
        ["node", "--input-type=module", "-e", NODE_STATUS, built.as_uri(), name],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "REDIS_URL": private_redis.url},
    )
    assert result.returncode == 0, result.stderr
    theirs = json.loads(result.stdout)
    expected = {_camel(f.name): getattr(ours, f.name) for f in dataclasses.fields(ours)}
    expected |= {"rateLimitedShare": ours.rate_limited_share, "holding": ours.holding}
    expected |= {"recoveryHold": ours.recovery_hold}
    assert sorted(theirs) == sorted(expected), "the same fields, camel-cased"
    assert ours.paused and ours.holding and ours.not_before and ours.paused_until, ours  # the fields say something
    for field, want in expected.items():
        got = theirs[field]
        if field == "now":
            assert want <= got < want + 30, (field, got, want)  # Unix seconds, a moment later
        elif field == "budgets":
            assert [b["kind"] for b in got] == [b.kind for b in want]
            for b, w in zip(got, want, strict=True):
                assert b == {**dataclasses.asdict(w), "level": pytest.approx(w.level, abs=w.limit)}, field
        else:
            assert got == want, (field, got, want)
