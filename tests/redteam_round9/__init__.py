"""Round nine: attacks on round eight's fixes (run_ended, HUNG_AFTER_S, too_busy)."""
