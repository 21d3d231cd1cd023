"""Round nine: attacks on round eight's fixes (run_ended, a silence rule since removed)."""
