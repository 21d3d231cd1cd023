"""Hydra plugin: every task package under the task root is an option of the ``task`` group."""
