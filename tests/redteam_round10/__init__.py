"""Round ten: attacks on the latest gateway changes (a request's time, run_ended, the hang-up)."""
