#!/usr/bin/env bash
# The one install script shared by the README, .ci/run and the Dockerfile.
# Creates ./.venv (unless VENV is set) and installs the pinned requirements.
#   bash scripts/install.sh            runtime + test requirements
#   INSTALL_DALI=1 bash scripts/install.sh   also DALI and its TF plugin (requirements-dali.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -r requirements.txt -r requirements-dev.txt
if [ "${INSTALL_DALI:-0}" = "1" ]; then
  "$VENV/bin/python" -m pip install --quiet -r requirements-dali.txt
fi
echo "installed into $VENV"
