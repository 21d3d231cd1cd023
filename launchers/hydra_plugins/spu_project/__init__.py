"""Hydra plugin: the project folder's ``conf/`` adds options to the packaged config groups."""
