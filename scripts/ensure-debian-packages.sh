#!/usr/bin/env bash
# Install the Debian packages named as "command:package" pairs where the command is missing.
# Never fails the caller: when a package cannot be installed it says so, and the features
# that need it report themselves unavailable (tests skip with that reason).
set -u
missing=()
for pair in "$@"; do
  cmd=${pair%%:*}; pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "spu: missing system packages: ${missing[*]} (install them with your package manager;" \
       "features that need them will report themselves unavailable)" >&2
  exit 0
fi
echo "spu: installing system packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/tmp/spu-apt.log 2>&1; then
  echo "spu: could not install ${missing[*]} (see /tmp/spu-apt.log);" \
       "features that need them will report themselves unavailable" >&2
fi
exit 0
