#!/usr/bin/env bash
# Mutation testing of the privacy-critical code: mutmut 3 over the modules and tests named
# in tests/mutation/setup.cfg. Slow (minutes to an hour): run by hand, not in CI.
#
#   tests/mutation/run.sh                 # run, then print the score and the surviving mutants
#   STAGE=/tmp/m TIMEOUT=3600 tests/mutation/run.sh
#   JOBS=4 tests/mutation/run.sh          # more parallel mutants (default 1: a shared machine)
#   tests/mutation/run.sh NAME...         # only these mutants (the survivors of the last run, say)
#   CONFIG=audit tests/mutation/run.sh    # the second target: setup-audit.cfg (default setup.cfg)
#
# mutmut writes a mutants/ folder beside the code it mutates, and reads its configuration from the current
# folder; to keep both out of the checkout, the code (its scenarios included) and the tests are copied to a staging
# folder ($STAGE) with this folder's setup.cfg, and mutmut runs there. Results stay in $STAGE/mutants
# (`cd $STAGE && mutmut results`, `mutmut show NAME`); a rerun in the same $STAGE only retries what changed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
config="${CONFIG:+setup-$CONFIG.cfg}"
config="${config:-setup.cfg}"
stage="${STAGE:-${TMPDIR:-/tmp}/sifl-mutation${CONFIG:+-$CONFIG}}"
jobs="${JOBS:-1}"
limit="${TIMEOUT:-3000}"

mkdir -p "$stage"
for path in sifl_ray tests docs; do  # the scenarios are package data, in sifl_ray/scenarios
    rm -rf "${stage:?}/$path"
    cp -a "$repo/$path" "$stage/$path"  # -a: mtimes kept, so mutmut keeps the mutants and verdicts it has
done
cp "$repo/pyproject.toml" "$stage/pyproject.toml"
cp "$here/$config" "$stage/setup.cfg"
find "$stage" -name __pycache__ -prune -exec rm -rf {} +

cd "$stage"
# the staged code, never an installed (editable) copy of the package
export PYTHONPATH="$stage"
status=0
timeout "$limit" mutmut run --max-children "$jobs" "$@" || status=$?
python "$here/score.py" "$stage" "${CONFIG:+equivalent-$CONFIG.txt}"
exit "$status"
