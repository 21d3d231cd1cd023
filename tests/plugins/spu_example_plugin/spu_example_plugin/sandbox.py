"""``sandbox=example``: a sandbox backend kept outside spu, with options of its own.

It is spu's bubblewrap backend plus one option, ``sandbox.options.motd``: a line left in
the agent's workspace (``MOTD``) before it starts. Its options model adds the field to
the local backend's, so ``sandbox.options.motdd=...`` fails before the run, naming the key.
"""

from __future__ import annotations

from spu.sandbox.base import SandboxRequest
from spu.sandbox.local import LocalSandbox
from spu.sandbox.options import LocalOptions


class ExampleOptions(LocalOptions):
    """The local backend's options and ``motd``."""

    motd: str = "hello from the example backend"
    """The line written to ``<workspace>/MOTD``."""


class ExampleSandbox(LocalSandbox):
    """Bubblewrap, with a message of the day in the workspace."""

    name = "example"
    options_model = ExampleOptions

    def _start(self, request: SandboxRequest) -> None:
        """The local backend's set-up (the base made the folders), then the ``MOTD`` file."""
        super()._start(request)
        self.write_file(f"{self.layout.workspace}/MOTD", f"{self.options['motd']}\n".encode())
