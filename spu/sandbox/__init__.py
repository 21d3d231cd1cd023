"""Sandboxes: where agents run, with the task read-only and the answers absent."""

from spu.sandbox.base import (
    LAYOUT,
    ExecCall,
    RunFolders,
    RunLimits,
    Sandbox,
    SandboxError,
    SandboxPaths,
    SandboxRequest,
    get_sandbox,
    register_sandbox,
)

__all__ = [
    "LAYOUT",
    "ExecCall",
    "RunFolders",
    "RunLimits",
    "Sandbox",
    "SandboxError",
    "SandboxPaths",
    "SandboxRequest",
    "get_sandbox",
    "register_sandbox",
]
