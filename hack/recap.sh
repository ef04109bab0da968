#!/usr/bin/env bash
# hack/recap.sh NAME COMMAND [ARG...] — run a go test COMMAND, its output
# shown as it comes and kept in _output/logs/NAME.log; when it fails, end
# with a recap of what failed.
#
# Why: a failing e2e test ends with the lab's log tails (hundreds of lines
# of kubelet and container logs, harness.DumpLogs), so the last lines of a
# run — all that CI shows of it — held the logs and not the failure. The
# recap puts the failed tests and their messages last.
#
# The recap is a filter, not a parser: go test does not mark which line of
# a test's output came from t.Errorf and which from t.Logf, so it keeps the
# FAIL lines, panics, and the test-file lines that read like a failure.
set -uo pipefail

if [ $# -lt 2 ]; then
	echo "usage: hack/recap.sh NAME COMMAND [ARG...]" >&2
	exit 2
fi
name=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/_output/logs"
log="$root/_output/logs/$name.log"

"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then
	exit 0
fi

{
	echo
	echo "==== recap of $name (exit $rc; whole output in $log) ===="
	grep -E -e '^[[:space:]]*--- FAIL' -e '^(FAIL|panic:|fatal error:)' \
		-e '_test\.go:[0-9]+: .*([Ww]ant|[Ff]ail|[Ee]rror|[Tt]imed out|[Tt]imeout|unexpected|not |no |gone|left|refused|reset)' \
		"$log" | cut -c1-400 | awk '!seen[$0]++' | tail -n 80
	echo "==== end of recap ===="
} >&2
exit "$rc"
