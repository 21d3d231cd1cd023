#!/usr/bin/env bash
# Harbor verifier of an SPU task (written by `spu task export --format harbor`).
# Grades $SPU_OUTPUT_DIR/rankings.json (default /output/rankings.json) with the SPU grader
# vendored beside this script, using the container's python3 and its standard library
# only; writes the task score to /logs/verifier/reward.txt and the full grade to
# /logs/verifier/grade.json. Runs as Harbor runs it (/tests/test.sh) or on its own
# (bash tests/test.sh from the task folder); arguments go to verify.py (--submission, --logs).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# -I: no PYTHONPATH, no user site, not the working folder on sys.path.
exec python3 -I "$here/verify.py" "$@"
