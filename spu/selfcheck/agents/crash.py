#!/usr/bin/env python3
"""Crash: fails before writing any submission."""


def main():
    raise RuntimeError("agent crashed before writing rankings.json")


if __name__ == "__main__":
    main()
