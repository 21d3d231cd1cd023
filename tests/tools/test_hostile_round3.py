"""Hostile inputs, round three (issue 30): the tools' side, through the real components.

- the egress proxy and a name whose first lookup fails and whose second is the host's
  loopback: refused and logged with the reason, never passed on unpinned (a DNS resolver
  of the test on the loopback of a network namespace the test makes);
- a gzip bomb and a large HTML page through ``fetch`` from a local server the test runs:
  the host process stays within a bound derived from ``tools.max_fetch_bytes``.

Every address targeted is the loopback of this machine or of a namespace the test creates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _in_namespace(resolv: Path) -> list[str]:
    """bubblewrap argv: a user and network namespace of its own, ``resolv`` as resolv.conf."""
    return ["bwrap", "--dev-bind", "/", "/", "--unshare-user", "--unshare-net", "--uid", "0",
            "--cap-add", "CAP_NET_BIND_SERVICE", "--ro-bind", str(resolv), "/etc/resolv.conf",
            "--chdir", str(REPO), "--"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("rcode", [2, 0], ids=["servfail", "no-answer"])
def test_a_name_that_first_fails_to_resolve_is_refused_not_passed_on(
        tmp_path: Path, rcode: int) -> None:
    """Issue 30, item 1: a lookup that fails must not let ``proxy.py`` resolve it again
    (its second answer, 127.0.0.1, reached a canary on the host's loopback)."""
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions attempts:1 timeout:2\n")
    folder = tmp_path / "tools"
    probe = subprocess.run(
        [*_in_namespace(resolv), sys.executable, "-m", "tests.tools.netns_egress_probe",
         str(folder), str(rcode)],
        capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["canary"] == [], found  # the host's loopback was never reached
    assert " 502 " in found["statuses"]["connect"] + " ", found
    assert " 502 " in found["statuses"]["get"] + " ", found
    assert " 403 " in found["statuses"]["mixed"] + " ", found
    by_host = {line["host"]: line for line in found["egress"]}
    for name in ("flaky.test", "flaky2.test"):
        assert by_host[name]["refused"].startswith("unresolved: gaierror"), by_host[name]
        assert "address" not in by_host[name]
    # Every address of a name is checked: one local address among public ones refuses it.
    assert by_host["mixed.test"]["refused"] == "local address"
    assert by_host["mixed.test"]["address"] == "127.0.0.1"
    assert sorted(by_host["mixed.test"]["addresses"]) == ["127.0.0.1", "93.184.216.34"]
