"""Pinned agent CLIs from npm, installed once into a cached tools folder.

Each ``package@version`` gets its own folder under the tools folder (default
``~/.cache/spu/tools``, or ``harness.tools_dir``), installed with ``npm install
--prefix`` into a temporary folder and renamed into place when complete, under a
file lock so that parallel runs install it once. The sandbox mounts the folder
read-only; nothing is installed inside a run.

``python -m spu.harness.npm_tools conf/harness/claude_code.yaml conf/harness/codex.yaml``
installs the CLIs those harness configs pin (``make cli-tools``); an argument
``package@version`` (``@openai/codex@0.171.0``) installs that version.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TOOLS_DIR = "~/.cache/spu/tools"
INSTALLED_MARKER = ".spu-installed.json"
INSTALL_TIMEOUT_S = 900


class ToolInstallError(RuntimeError):
    """A pinned CLI could not be installed; the message says why and what to do."""


@dataclass(frozen=True)
class InstalledTool:
    """A pinned npm package installed in its own folder."""

    package: str
    """npm package name, e.g. ``@anthropic-ai/claude-code``."""
    version: str
    """Exact version installed."""
    prefix: Path
    """The install folder (``npm install --prefix``)."""

    def bin(self, name: str, root: str | Path | None = None) -> str:
        """Path of executable ``name``, under ``root`` where the folder is mounted elsewhere."""
        return str(Path(root or self.prefix) / "node_modules" / ".bin" / name)


def tools_dir(configured: str | None = None) -> Path:
    """The tools folder: ``configured``, else ``$SPU_TOOLS_DIR``, else ``~/.cache/spu/tools``."""
    chosen = configured or os.environ.get("SPU_TOOLS_DIR") or DEFAULT_TOOLS_DIR
    return Path(chosen).expanduser().resolve()


def install_prefix(root: Path, package: str, version: str) -> Path:
    """``<root>/<package with / as +>@<version>``, e.g. ``@openai+codex@0.171.0``."""
    return root / f"{package.replace('/', '+')}@{version}"


def installed(package: str, version: str, root: Path) -> InstalledTool | None:
    """The installed tool, or None when that exact version is not installed."""
    prefix = install_prefix(root, package, version)
    manifest = prefix / "node_modules" / package / "package.json"
    if not (prefix / INSTALLED_MARKER).is_file() or not manifest.is_file():
        return None
    try:
        found = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return InstalledTool(package, version, prefix) if found == version else None


def ensure_installed(package: str, version: str, root: Path) -> InstalledTool:
    """Install ``package@version`` under ``root`` unless it is there; return it.

    Raises
    ------
    ToolInstallError
        When npm is missing or the install fails (offline, unknown version).
    """
    done = installed(package, version, root)
    if done is not None:
        return done
    npm = shutil.which("npm")
    if npm is None:
        raise ToolInstallError(
            f"cannot install {package}@{version}: npm is not installed "
            f"(Debian packages 'nodejs' and 'npm')")
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(root.stat().st_mode | 0o555)  # the agent runs as another user
    prefix = install_prefix(root, package, version)
    with open(root / f".{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = installed(package, version, root)
        if done is not None:
            return done
        partial = prefix.with_name(f"{prefix.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            proc = subprocess.run(
                [npm, "install", "--prefix", str(partial), "--no-audit", "--no-fund",
                 "--loglevel=error", f"{package}@{version}"],
                capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, cwd=partial,
            )
        except subprocess.TimeoutExpired:
            shutil.rmtree(partial, ignore_errors=True)
            raise ToolInstallError(f"npm install {package}@{version} timed out") from None
        if proc.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise ToolInstallError(
                f"npm install {package}@{version} failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-800:]}")
        (partial / INSTALLED_MARKER).write_text(
            json.dumps({"package": package, "version": version}))
        _readable_by_all(partial)
        shutil.rmtree(prefix, ignore_errors=True)
        partial.rename(prefix)
    done = installed(package, version, root)
    if done is None:
        raise ToolInstallError(f"npm installed {package}, but not version {version}")
    return done


def _readable_by_all(folder: Path) -> None:
    """Let any user read the install and run its executables.

    Sandboxed agents run as another user than the one who installed, whatever the umask.
    """
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        executable = path.is_dir() or mode & 0o100
        path.chmod(mode | (0o555 if executable else 0o444))


def main(argv: list[str] | None = None) -> int:
    """Install the CLIs pinned by the given harness config files."""
    import yaml

    status = 0
    for name in argv if argv is not None else sys.argv[1:]:
        if not name.endswith((".yaml", ".yml")) and "@" in name.lstrip("@"):
            pinned, _, wanted = name.rpartition("@")
            try:
                tool = ensure_installed(pinned, wanted, tools_dir())
            except ToolInstallError as exc:
                print(f"spu: {exc}", file=sys.stderr)
                status = 1
                continue
            print(f"{pinned}@{wanted}: {tool.prefix}")
            continue
        try:
            cfg = yaml.safe_load(Path(name).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            print(f"spu: cannot read {name}: {exc}", file=sys.stderr)
            status = 1
            continue
        package, version = cfg.get("cli_package"), cfg.get("version")
        if not package or not version:
            print(f"spu: {name}: keys 'cli_package' and 'version' are required",
                  file=sys.stderr)
            status = 1
            continue
        try:
            tool = ensure_installed(str(package), str(version), tools_dir(cfg.get("tools_dir")))
        except ToolInstallError as exc:
            print(f"spu: {exc}", file=sys.stderr)
            status = 1
            continue
        print(f"{package}@{version}: {tool.prefix}")
    return status


if __name__ == "__main__":
    sys.exit(main())
