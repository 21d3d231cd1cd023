#!/usr/bin/env python3
"""Memory hog: writes an early note, then touches memory in 32 MiB steps until it is stopped."""

import os


def main():
    with open(os.path.join(os.environ["SPU_OUTPUT_DIR"], "started.txt"), "w") as f:
        f.write("hog started\n")
    chunks = []
    for _ in range(4096):  # 128 GiB at most: far above any limit the tests set
        chunks.append(b"\x01" * (32 * 1024 * 1024))
    print("the memory limit never fired")


if __name__ == "__main__":
    main()
