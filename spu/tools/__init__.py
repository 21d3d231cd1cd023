"""The audited tools of a run (paper 3.7, E.4; SPEC section 7).

Agents reach the web only through an audited service that lives outside their sandbox:

- :mod:`spu.tools.service`: the MCP server (``search``, ``fetch``, ``policy_stop``) of one
  run, on the host's loopback behind a per-run secret, given to the agent in
  ``SPU_TOOLS_URL`` and to Claude Code and Codex as their MCP server ``spu``;
- :mod:`spu.tools.providers`: who answers (``tools.provider``): :mod:`spu.tools.offline`
  (a JSON Lines corpus, BM25) or :mod:`spu.tools.web` (SearXNG or Brave, ``httpx``,
  ``trafilatura``, ``pypdf``);
- :mod:`spu.tools.audit`: ``<run_dir>/tools/audit.jsonl``, one line per call, as it happens;
- :mod:`spu.tools.egress`: a per-run egress proxy that records every connection made
  around the service, and the shell downloads of a trajectory;
- :mod:`spu.tools.session`: the runner's handle on all of it.

Nothing heavy is imported here: the ``mcp`` SDK, ``uvicorn``, ``httpx``, ``bm25s`` and
the extractors load when a run starts its service.
"""
