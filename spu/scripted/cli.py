"""``spu scripted-server``: serve the scripted model by hand (to drive a CLI yourself)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    """Add ``scripted-server`` to the ``spu`` parser."""
    p = sub.add_parser(
        "scripted-server",
        help="serve the scripted model (Anthropic Messages and OpenAI Responses APIs)",
        description="Serve a scripted model on 127.0.0.1 until interrupted. Point Claude "
        "Code at it with ANTHROPIC_BASE_URL=URL, Codex with a model provider whose "
        "base_url is URL/v1.",
    )
    p.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    p.add_argument("--script", default="presented_order",
                   help="built-in script (presented_order, refusal, api_error) or a JSON "
                   "script file (default: presented_order)")
    p.add_argument("--log", type=Path, default=None,
                   help="append one JSON line per request to this file")
    p.add_argument("--log-bodies", action="store_true",
                   help="include the request bodies in the log (large)")
    p.set_defaults(handler=scripted_server_command)


def scripted_server_command(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C; exit 2 when the script cannot be read."""
    from spu.scripted.script import ScriptError, load_script
    from spu.scripted.server import ScriptedModelServer

    try:
        script = load_script(args.script)
    except ScriptError as exc:
        print(f"spu scripted-server: {exc}", file=sys.stderr)
        return 2
    server = ScriptedModelServer(script, port=args.port, log_path=args.log,
                                 log_bodies=args.log_bodies)
    print(f"scripted model '{script.name}' at {server.url} (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
