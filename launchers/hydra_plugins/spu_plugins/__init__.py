"""Hydra plugin: config group files shipped by installed spu plugin packages."""
