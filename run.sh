#!/usr/bin/env bash
# chainlab developer entry point. Every command sets up what it needs itself:
# system packages (Graphviz, Chromium, python3-venv) on Debian, a virtualenv in .venv,
# and the package with all extras. Usage:
#   ./run.sh demo            JupyterLab on notebooks/01-quickstart.ipynb (the main job)
#   ./run.sh terminal-demo   the same example in the terminal (no browser)
#   ./run.sh test            the whole test suite: unit, notebooks (nbval), browser e2e
#   ./run.sh bench           the benchmarks (prints tables)
#   ./run.sh lint            ruff + mypy
#   ./run.sh docs            build the documentation site (warnings as errors) into site/, serve it
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

sudo_() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

system_packages() {
  local need=()
  command -v dot >/dev/null || need+=(graphviz)
  { command -v chromium >/dev/null || command -v chromium-browser >/dev/null; } || need+=(chromium)
  python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
  # the tests start a throwaway PostgreSQL server of their own (tests/pg.py)
  { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null; } \
    || need+=(postgresql)
  [ ${#need[@]} -eq 0 ] && return 0
  if command -v apt-get >/dev/null; then
    echo "installing system packages: ${need[*]}"
    sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "not a Debian machine: please install ${need[*]} yourself" \
         "(without Graphviz chainlab uses its WebAssembly build; without Chromium the browser test skips)"
  fi
}

install_stamp() { echo "$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"; }

python_env() {
  local stamp; stamp=$(install_stamp)
  [ -f "$stamp" ] && return 0
  [ -x "$PY" ] || python3 -m venv "$VENV"
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q -e ".[dev]"
  rm -f "$VENV"/.installed-*
  touch "$stamp"
}

case "${1:-}" in
  demo)
    # one line per phase: the first run installs for minutes, quietly (pip -q)
    say() { echo "run.sh demo: $*"; }
    say "1/4 system packages: checking for Graphviz, Chromium, python3-venv, PostgreSQL"
    system_packages
    if [ -x "$PY" ]; then say "2/4 virtualenv: using $VENV"
    else say "2/4 virtualenv: creating $VENV"; python3 -m venv "$VENV"; fi
    if [ -f "$(install_stamp)" ]; then say "3/4 pip install: $VENV is up to date"
    else say "3/4 pip install: chainlab with all its extras into $VENV (the first time takes a few minutes)"; fi
    python_env
    say "4/4 starting JupyterLab on notebooks/01-quickstart.ipynb (Ctrl-C stops it)"
    root_flag=(); [ "$(id -u)" = 0 ] && root_flag=(--allow-root)
    exec "$VENV/bin/jupyter" lab notebooks/01-quickstart.ipynb --ip=127.0.0.1 "${root_flag[@]}" ${JUPYTER_ARGS:-} ;;
  terminal-demo)
    python_env
    exec "$VENV/bin/chainlab" demo ;;
  test)
    system_packages; python_env
    "$PY" -m pytest -n 2 --dist loadgroup tests
    "$PY" -m pytest -p no:xdist --nbval notebooks --nbval-sanitize-with notebooks/sanitize.cfg ;;
  bench)
    python_env
    for b in benchmarks/bench_*.py; do echo "== $b"; "$PY" "$b"; done ;;
  lint)
    python_env
    "$VENV/bin/ruff" check chainlab tests benchmarks
    "$VENV/bin/mypy" ;;
  docs)
    python_env
    "$VENV/bin/mkdocs" build --strict
    exec "$VENV/bin/mkdocs" serve --dev-addr "${DOCS_ADDR:-127.0.0.1:8000}" ;;
  *)
    sed -n '2,10p' "$0"; exit 2 ;;
esac
