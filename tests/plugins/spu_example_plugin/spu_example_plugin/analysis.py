"""The ``example`` statistic (entry point group ``spu.analyses``): written with the analyses
registry (placeholder until it exists)."""
