#!/usr/bin/env bash
# The project's set-up and everyday commands, for a fresh Debian machine or a used one:
#
#   ./dev.sh test [pytest args]   create/reuse .venv from the lock, then the whole test suite
#                                 (in SYPHON_TEST_WORKERS parallel workers, default 4): the
#                                 main run, then the version legs (Python 3.12 where pyenv
#                                 has it, Spark 4.0), each in its own environment; with
#                                 pytest args, only those tests, in the main environment
#   ./dev.sh legs                 the version legs alone
#   ./dev.sh demo                 create/reuse .venv, then run syphon on the embedded default
#   ./dev.sh lint                 ruff and mypy
#   ./dev.sh lock                 re-resolve pyproject.toml into requirements.lock
#   ./dev.sh mutate [module...]   mutation testing of the modules that carry the
#                                 invariants (slow; see tests/MUTANTS.md)
#
# Each installs what is missing: Python's venv module, a C compiler (python-qpid-proton
# builds from source), Java (Spark), and for the tests Chromium (the report is drawn
# headless), node with npm (Azurite, the storage emulator, from its npm lock) and Maven
# (Delta Lake's jars for Spark), via apt-get when needed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

VENV=.venv
PY=${PYTHON:-python3}
STAMP=$VENV/.syphon-installed

say() { printf '==> %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else say "need root to run: $*"; exit 1
  fi
}

apt_install() {
  say "installing with apt-get: $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

ensure_python() {
  command -v "$PY" >/dev/null 2>&1 || apt_install python3 python3-venv python3-dev
  "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    say "$PY is older than 3.10; set PYTHON=/path/to/python3.10+"; exit 1; }
  "$PY" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
}

ensure_compiler() {
  command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
  "$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || apt_install python3-dev
}

ensure_java() {
  if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then
    apt_install default-jre-headless
  fi
}

ensure_venv() {
  local want
  want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
    return
  fi
  ensure_compiler
  say "installing the locked environment into $VENV"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
  echo "$want" > "$STAMP"
}

# the run report's test draws the page in headless Chromium (tests only, not the job)
ensure_chromium() {
  command -v chromium >/dev/null 2>&1 || apt_install chromium fonts-dejavu-core
}

# the tests' Spark JVMs start from a class-data-sharing archive (tests/support/jvm.py): made once
# per environment and Java, about 6 s less per JVM start
ensure_test_jvm_archive() {
  local want
  want=$( (java -version 2>&1; cat "$STAMP") | sha256sum | cut -d' ' -f1)
  if [ -f "$VENV/spark-classes.jsa" ] && [ "$(cat "$VENV/spark-classes.stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  say "making the tests' JVM class archive (once per environment)"
  rm -f "$VENV/spark-classes.jsa"
  (cd tests/support && "../../$VENV/bin/python" jvm.py) >/dev/null 2>&1 || { say "no JVM class archive: the tests' JVMs start slower"; return; }
  echo "$want" > "$VENV/spark-classes.stamp"
}

# the official SDK samples the local Service Bus is tested with: fetched once (the SDK's
# source archive, checked against requirements.lock's hashes) into ~/.cache/syphon-tests
ensure_sdk_samples() {
  "$VENV/bin/python" tests/support/sdk_samples.py >/dev/null 2>&1 \
    || { say "could not fetch the SDK samples (tests/support/sdk_samples.py): their tests will fail"; }
}

# Delta Lake's jars for Spark (tests/support/delta_jars.py): copied once by Maven into
# .venv/delta-jars (no transitive dependencies), each checked against its pinned SHA-256;
# the tests' sessions load them from there, so nothing is resolved at a session's start.
# Maven from apt-get where it is missing
ensure_delta_jars() {
  "$VENV/bin/python" -c 'import sys; sys.path.insert(0, "tests/support"); import delta_jars; sys.exit(not delta_jars.fetched())' 2>/dev/null && return
  command -v mvn >/dev/null 2>&1 || apt_install maven
  say "copying Delta Lake's jars for Spark into $VENV/delta-jars (Maven)"
  "$VENV/bin/python" tests/support/delta_jars.py \
    || say "could not copy Delta's jars (tests/support/delta_jars.py): the catalog tests will fail"
}

# the services the tests start (tests/services/package.json, pinned by its lock): Azurite,
# the Azure Storage emulator, for the audit on object storage. Installed with npm ci into
# tests/services/node_modules, again only when the lock changes; node and npm from
# apt-get where they are missing
ensure_test_services() {
  local dir=tests/services want
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  want=$( (node --version; cat "$dir/package-lock.json") | sha256sum | cut -d' ' -f1)
  if [ -f "$dir/node_modules/.syphon-installed" ] \
    && [ "$(cat "$dir/node_modules/.syphon-installed")" = "$want" ]; then
    return
  fi
  say "installing the tests' services from $dir/package-lock.json (npm ci)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$want" > "$dir/node_modules/.syphon-installed"
}

setup() { ensure_python; ensure_java; ensure_venv; }

# The version matrix (README, "Tested versions"). The main run is on this machine's
# Python and the lock's Spark (4.2). Beside it, each in an environment of its own from
# the same lock (.venv-py3.12, .venv-spark4.0):
# - Python 3.12, the platforms' (serverless environments 3 to 5, Databricks Runtime 16
#   and 17), found with pyenv where the machine has it: the unit tests, and the whole-job
#   tests of each entry point (the demo, a Connect run on sandboxed workers,
#   spark-submit from a packed environment, the notebook). Those run there instead of in
#   the main run: a whole job is tested once on each version it runs on, not twice on
#   one. A machine without 3.12 runs them in the main run and says the leg is skipped.
# - Spark 4.0, the bundle's job cluster's (Databricks Runtime 17.3 LTS), with Delta's 4.0
#   jars (requirements-spark4.0.lock's pins in place of the lock's): the Spark tests and
#   the demo, on this machine's Python.
LEG_PY312_OWNS="tests/job/test_demo.py tests/job/test_connect_sandbox.py tests/job/test_packed_env.py tests/job/test_notebook.py"
LEG_PY312_TESTS="tests/unit $LEG_PY312_OWNS"
LEG_SPARK40_TESTS="tests/spark tests/job/test_demo.py"

find_python312() {
  local c
  for c in "${SYPHON_PYTHON312:-}" "$(command -v python3.12 2>/dev/null || true)" \
    "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12; do
    # pyenv's shim is on the PATH even where its 3.12 is not the selected version, and
    # fails when run: a candidate counts only if it runs as 3.12
    if [ -n "$c" ] && [ -x "$c" ] \
      && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      echo "$c"; return
    fi
  done
}

# leg_extras DIR: what a leg's environment needs beside its packages: Delta's jars for
# its Spark and the tests' JVM class archive
leg_extras() {
  local dir=$1
  "$dir/bin/python" tests/support/delta_jars.py \
    || say "could not copy Delta's jars into $dir: its catalog tests will fail"
  (cd tests/support && "../../$dir/bin/python" jvm.py) >/dev/null 2>&1 \
    || say "no JVM class archive for $dir: its JVMs start slower"
}

# leg_stamp DIR WANT: whether DIR was installed for WANT (a digest of what it came from)
leg_stamp() { [ -f "$1/.syphon-installed" ] && [ "$(cat "$1/.syphon-installed")" = "$2" ]; }

# py312_venv DIR PYTHON: the Python 3.12 leg's environment, the lock installed again for
# that interpreter only when the lock, pyproject.toml or the interpreter changed
py312_venv() {
  local dir=$1 py=$2 want
  want=$( (cat requirements.lock pyproject.toml; "$py" --version) | sha256sum | cut -d' ' -f1)
  leg_stamp "$dir" "$want" && return
  say "installing the environment $dir ($("$py" --version))"
  [ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r requirements.lock
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
  leg_extras "$dir"
  echo "$want" > "$dir/.syphon-installed"
}

# spark40_venv DIR: the Spark 4.0 leg's environment, .venv's packages with the leg's own
# PySpark in front (tests/versions/overlay.py): PySpark 4.0 installed, nothing else again
spark40_venv() {
  local dir=$1 want site
  want=$( (cat "$STAMP" requirements-spark4.0.lock tests/versions/overlay.py) | sha256sum | cut -d' ' -f1)
  leg_stamp "$dir" "$want" && return
  say "installing the environment $dir (.venv with requirements-spark4.0.lock in front)"
  rm -rf "$dir"
  "$VENV/bin/python" -m venv --without-pip "$dir"
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$dir/bin/python" tests/versions/overlay.py link "$site"
  # pip is .venv's, seen through the link; it installs into the leg's own site-packages
  # and leaves .venv's releases where they are (--ignore-installed)
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps --ignore-installed \
    --require-hashes -r requirements-spark4.0.lock
  "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps --ignore-installed -e .
  "$dir/bin/python" tests/versions/overlay.py check
  leg_extras "$dir"
  echo "$want" > "$dir/.syphon-installed"
}

# leg NAME DIR TESTS: one leg's tests, in its environment
leg() {
  local name=$1 dir=$2
  say "version leg $name: $3"
  # shellcheck disable=SC2086  # the test paths are words
  "$dir/bin/python" -m pytest -q -n "${SYPHON_TEST_WORKERS:-4}" --dist loadfile \
    --no-loadscope-reorder $3
}

# legs_setup: the legs' environments; PY312 is the 3.12 interpreter, or empty without one
legs_setup() {
  PY312=$(find_python312)
  if [ -n "$PY312" ]; then
    py312_venv .venv-py3.12 "$PY312"
  else
    say "version leg Python 3.12 skipped: no python3.12 here (pyenv install 3.12, or set SYPHON_PYTHON312); its whole-job tests run in the main run"
  fi
  spark40_venv .venv-spark4.0
}

legs() {
  local failed=0
  if [ -n "$PY312" ]; then
    leg "Python 3.12" .venv-py3.12 "$LEG_PY312_TESTS" || failed=1
  fi
  leg "Spark 4.0" .venv-spark4.0 "$LEG_SPARK40_TESTS" || failed=1
  return $failed
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  test)
    setup
    ensure_chromium
    ensure_test_jvm_archive
    ensure_sdk_samples
    ensure_delta_jars
    ensure_test_services
    # Test files go to parallel workers (pytest-xdist, one file per worker at a time):
    # many tests wait on a subprocess or the network part of the time. Four workers on 2
    # cores: 340 s and 598 busy CPU-s against 377 s and 530 CPU-s with three (the same
    # tree, one invocation after the other: three leave the cores idle while tests wait,
    # and each worker is a JVM more). SYPHON_TEST_WORKERS=0 runs serially. Files go out
    # in collection order (the slowest first, see tests/conftest.py).
    # Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE):
    # the suite starts some hundred Python processes (Spark's Python workers, `syphon`
    # commands, local Service Buses) that each compiled syphon's modules again, and
    # pytest rewrote the test modules' asserts in every worker. The caches go where
    # Python keeps them (__pycache__, ignored by git and left out of the wheel).
    unset PYTHONDONTWRITEBYTECODE
    # with test arguments only those run; the whole suite is the main run and the version
    # legs after it, the 3.12 leg's whole-job tests left out of the main run when it runs
    if [ $# -gt 0 ]; then
      exec "$VENV/bin/python" -m pytest -n "${SYPHON_TEST_WORKERS:-4}" --dist loadfile \
        --no-loadscope-reorder "$@"
    fi
    legs_setup
    owned=()
    if [ -n "$PY312" ]; then
      for f in $LEG_PY312_OWNS; do owned+=("--ignore=$f"); done
    fi
    main=0
    "$VENV/bin/python" -m pytest -n "${SYPHON_TEST_WORKERS:-4}" --dist loadfile \
      --no-loadscope-reorder "${owned[@]}" || main=$?
    legs_failed=0
    legs || legs_failed=1
    [ "$main" = 0 ] && [ "$legs_failed" = 0 ] || exit 1
    ;;
  legs)  # the version legs alone (./dev.sh test runs them after the main run)
    setup
    unset PYTHONDONTWRITEBYTECODE
    legs_setup
    legs
    ;;
  demo)
    setup
    exec "$VENV/bin/python" -m syphon_demo "$@"
    ;;
  lint)
    setup
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    exec "$VENV/bin/mypy"
    ;;
  mutate)
    setup
    # cosmic-ray changes a module on disk once per mutant and runs its fast tests
    # (tests/mutation/<module>.toml). It works in a copy of the tree under .mutation/
    # (never in the working tree), one per module, with its session beside it: an
    # interrupted session resumes where it stopped when run again (on the tree as it is
    # then), as long as the module and its toml are unchanged; otherwise it starts over
    # on a fresh copy.
    [ $# -gt 0 ] || set -- lease lanes settle replay run
    top=$PWD
    for name in "$@"; do
      [ -f "tests/mutation/$name.toml" ] || { say "no tests/mutation/$name.toml"; exit 2; }
      work=.mutation/$name
      # the session stands for the module and its settings as they were (tests added
      # since only kill more: the mutants not yet run meet them, and a survivor already
      # recorded is checked against them by hand, see tests/MUTANTS.md)
      module=$(sed -n 's/^module-path *= *"\(.*\)"/\1/p' "tests/mutation/$name.toml")
      stamp=$(cat "tests/mutation/$name.toml" "$module" | sha256sum | cut -d' ' -f1)
      if [ -f "$work/$name.sqlite" ] && [ "$(cat "$work/stamp" 2>/dev/null)" = "$stamp" ]; then
        say "mutating $name: resuming its session ($work)"
        # an interrupted session may have left its last mutant in the copy
        rm -rf "$work/tree/src" "$work/tree/tests" && cp -r src tests "$work/tree/"
      else
        say "mutating $name (tests/mutation/$name.toml) in $work"
        rm -rf "$work" && mkdir -p "$work/tree"
        tar --exclude=./.venv --exclude=./.git --exclude=./.mutation -cf - . \
          | tar -xf - -C "$work/tree"
        (cd "$work/tree" && export PATH="$top/$VENV/bin:$PATH" PYTHONPATH="$PWD/src" \
          && cosmic-ray init "tests/mutation/$name.toml" "../$name.sqlite" --force \
          && cr-filter-pragma "../$name.sqlite" \
          && cr-filter-operators "../$name.sqlite" "tests/mutation/$name.toml" \
          && cosmic-ray baseline "tests/mutation/$name.toml")
        echo "$stamp" > "$work/stamp"
      fi
      (cd "$work/tree" && export PATH="$top/$VENV/bin:$PATH" PYTHONPATH="$PWD/src" \
        && cosmic-ray exec "tests/mutation/$name.toml" "../$name.sqlite" >/dev/null)
      "$VENV/bin/python" tests/mutation/score.py "$work/$name.sqlite" "$name"
    done
    ;;
  lock)
    ensure_python
    [ -x "$VENV/bin/pip-compile" ] || { [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"; "$VENV/bin/python" -m pip install -q pip-tools; }
    "$VENV/bin/pip-compile" -q --all-extras --generate-hashes --allow-unsafe --strip-extras \
      --no-emit-index-url --no-emit-find-links --output-file requirements.lock pyproject.toml
    # the cluster's part of it (no extras, no PySpark), for jobs/pack_env.sh
    "$VENV/bin/python" jobs/runtime_lock.py
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    [ "$cmd" = help ] || exit 2
    ;;
esac
