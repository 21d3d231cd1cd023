"""Fixtures of the dataset tests: a private data folder, task roots, registries over HTTP."""

from __future__ import annotations

import http.server
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_TASK, EXAMPLE_TWO_GROUPS


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$SPU_DATA_DIR`` of this test alone; no registry in the environment."""
    folder = tmp_path / "data"
    monkeypatch.setenv("SPU_DATA_DIR", str(folder))
    monkeypatch.delenv("SPU_REGISTRY", raising=False)
    return folder


@pytest.fixture
def task_root(tmp_path: Path) -> Path:
    """A task root holding copies of the two example tasks."""
    root = tmp_path / "tasks"
    root.mkdir()
    for task in (EXAMPLE_TASK, EXAMPLE_TWO_GROUPS):
        shutil.copytree(task, root / task.name)
    return root


@dataclass
class Served:
    """A folder served over HTTP on 127.0.0.1, counting the requests per path."""

    url: str
    folder: Path
    hits: dict[str, int] = field(default_factory=dict)
    routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = field(
        default_factory=dict)
    """Path -> a handler of its own (a hostile answer)."""


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[Served]:
    """A real HTTP server on 127.0.0.1 serving ``tmp_path/www`` (as ``python -m http.server``)."""
    folder = tmp_path / "www"
    folder.mkdir()
    served = Served("", folder)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            served.hits[path] = served.hits.get(path, 0) + 1
            route = served.routes.get(path)
            if route is not None:
                route(self)
                return
            super().do_GET()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``spu ARGS`` in this process: exit status, stdout, stderr."""
    from spu.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def left_behind(data_dir: Path, name: str) -> list[str]:
    """What a refused pull of ``name`` left under the data folder (locks aside)."""
    root = data_dir / "datasets"
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.iterdir()
                  if p.name == name or p.name.startswith(f".partial-{name}@"))
