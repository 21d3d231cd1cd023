"""Offline stand-ins for model providers: the scripted model server and its scripts.

``model=scripted`` runs the real agent CLIs against :class:`ScriptedModelServer`,
started by the harness for the run; ``spu scripted-server`` serves it by hand.
"""

from spu.scripted.script import (
    Script,
    ScriptedTurn,
    ScriptError,
    default_script,
    load_script,
    scripted_usage,
)
from spu.scripted.server import ScriptedModelServer, ServedResponse, reported_usage

__all__ = [
    "Script",
    "ScriptError",
    "ScriptedModelServer",
    "ScriptedTurn",
    "ServedResponse",
    "default_script",
    "load_script",
    "reported_usage",
    "scripted_usage",
]
