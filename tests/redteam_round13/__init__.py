"""Red-team round thirteen: the gateway in its own process, the relay, the replays of issue 41."""
