"""A plugin ships its conf/ as package data: the example plugin's wheel holds its YAML files.

Without ``[tool.setuptools.package-data]`` a wheel carries the plugin's modules and none of
its ``conf/<group>/<name>.yaml``: installed from it, ``harness=example`` is no option
(docs/contributing.md, "Ship the config files"). Built offline from a copy of the plugin.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parent / "spu_example_plugin"
CONF_FILES = {"spu_example_plugin/conf/harness/example.yaml",
              "spu_example_plugin/conf/sandbox/example.yaml",
              "spu_example_plugin/conf/effort/turbo.yaml"}

pytestmark = pytest.mark.slow


def build_wheel(source: Path, out: Path) -> set[str]:
    pytest.importorskip("build", reason="build is not installed (the test extra)")
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                           "--outdir", str(out), str(source)], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0 and "setuptools>=77" in done.stdout + done.stderr:
        pytest.skip("setuptools>=77 is not installed (the test extra)")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def copy_plugin(tmp_path: Path) -> Path:
    source = tmp_path / "plugin"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("*.egg-info", "build",
                                                                   "__pycache__"))
    return source


def test_the_example_plugin_wheel_holds_its_conf(tmp_path: Path) -> None:
    names = build_wheel(copy_plugin(tmp_path), tmp_path / "dist")
    assert CONF_FILES <= names
    on_disk = {p.relative_to(PLUGIN).as_posix()
               for p in (PLUGIN / "spu_example_plugin" / "conf").rglob("*.yaml")}
    assert on_disk == {n for n in names if n.endswith(".yaml")}


def test_without_package_data_the_conf_is_left_out(tmp_path: Path) -> None:
    """The fault the docs warn of, shown: the same plugin without its package-data line."""
    source = copy_plugin(tmp_path)
    pyproject = source / "pyproject.toml"
    text = re.sub(r"\[tool\.setuptools\.package-data\][^\[]*", "", pyproject.read_text())
    pyproject.write_text(text)
    names = build_wheel(source, tmp_path / "dist")
    assert "spu_example_plugin/harness.py" in names
    assert not CONF_FILES & names
