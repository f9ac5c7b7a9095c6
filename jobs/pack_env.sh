#!/usr/bin/env bash
# Packs syphon for a Spark cluster without internet: the wheel plus its runtime
# dependencies (requirements-runtime.lock, hashes checked; no PySpark: the cluster has
# its own) in a virtual environment packed by venv-pack, to pass to spark-submit with
# --archives. Run it on a machine with internet and the same OS, CPU architecture and
# Python (same path: venv-pack does not copy the interpreter) as the cluster's nodes.
#
#   jobs/pack_env.sh [OUT]        default OUT: dist/syphon-env.tar.gz
#
# PYTHON chooses the interpreter (default python3); venv-pack must be importable by it
# (it is in the dev environment: .venv/bin/python), or VENV_PACK names its command.
# PACK_COMPRESS_LEVEL sets gzip's level (0-9, default 4). Keep the .tar.gz format: Spark
# unpacks it with tar, which keeps the venv's links to the interpreter.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist/syphon-env.tar.gz}
py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say() { printf 'pack_env: %s\n' "$*" >&2; }

say "building the syphon wheel"
"$py" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir "$work/dist" "$root"

say "installing requirements-runtime.lock and the wheel into a fresh environment"
# without pip of its own (the cluster installs nothing): this pip installs into it
# (pip >= 22.3), which saves seeding one and keeps it out of the archive
"$py" -m venv --without-pip "$work/env"
"$py" -m pip --python "$work/env/bin/python" install -q --disable-pip-version-check \
  --require-hashes -r "$root/requirements-runtime.lock"
"$py" -m pip --python "$work/env/bin/python" install -q --disable-pip-version-check \
  --no-deps "$work"/dist/syphon-*.whl

say "packing it into $out"
mkdir -p "$(dirname "$out")"
rm -f "$out"
if [ -n "${VENV_PACK:-}" ]; then
  "$VENV_PACK" -q --compress-level "${PACK_COMPRESS_LEVEL:-4}" -p "$work/env" -o "$out"
else
  "$py" -m venv_pack -q --compress-level "${PACK_COMPRESS_LEVEL:-4}" -p "$work/env" -o "$out"
fi
cp "$work"/dist/syphon-*.whl "$(dirname "$out")/"
say "done: $out (and the wheel beside it)"
