#!/usr/bin/env bash
# hack/fuzz.sh — run every Go fuzz target (func FuzzXxx(*testing.F)) of the
# root module, one at a time, each for FUZZTIME (default 60s). `make fuzz`
# calls it for the long run; `make test` (through `make fuzz-short`) with
# FUZZTIME=10s.
#
# Targets are found with `go test -list '^Fuzz'` over the packages whose test
# files declare one, so such a package that does not compile fails this
# script loudly. Every target runs even when an earlier
# one fails; the script exits 1 at the end if any failed. A failing input is
# written by go test to the package's testdata/fuzz/FuzzXxx/: commit it, it
# then runs as a regression case in every `go test`. Until then the new file
# leaves the checkout dirty, which is meant: a failure is not to be lost.
# The fuzzer's own corpus of interesting inputs stays in the Go build cache
# ($(go env GOCACHE)/fuzz), outside the checkout.
set -euo pipefail

FUZZTIME=${FUZZTIME:-60s}
# FUZZMINIMIZETIME bounds how long the fuzzer shrinks each new interesting
# input (go test's -fuzzminimizetime, 60s by default): in a 10 s pass the
# shrinking, not the fuzzing, took most of the time. Empty: go's default.
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-}
GO=${GO:-go}
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# took prints the time since the start, compiling and listing included.
took() {
	local s=$((SECONDS - start))
	printf '%dm%02ds in all' $((s / 60)) $((s % 60))
}

# count_files counts the files in a directory, 0 when there is none.
count_files() {
	if [[ -d $1 ]]; then find "$1" -type f | wc -l; else echo 0; fi
}

start=$SECONDS
# Only the packages whose tests declare a fuzz target are listed: linking
# every test binary of the module for -list took minutes on a fresh machine.
mapfile -t fuzzpkgs < <(grep -rlE '^func Fuzz[A-Za-z0-9_]*\(' --include='*_test.go' --exclude-dir=e2e --exclude-dir=.git . |
	xargs -r -n1 dirname | sort -u)
if ((${#fuzzpkgs[@]} == 0)); then
	echo "fuzz: no fuzz targets (func FuzzXxx) in the module yet: nothing to run"
	exit 0
fi
echo "fuzz: finding fuzz targets: $GO test -list '^Fuzz' ${fuzzpkgs[*]}"
listing=$("$GO" test -list '^Fuzz' "${fuzzpkgs[@]}")

# go test -list prints a package's matching names, then "ok <package> <time>".
# Turn that into "<package> <name>" lines.
mapfile -t targets < <(printf '%s\n' "$listing" | awk '
	/^Fuzz[A-Za-z0-9_]*$/ { names[n++] = $0; next }
	/^ok[ \t]/            { for (i = 0; i < n; i++) print $2, names[i]; n = 0 }
')

if ((${#targets[@]} == 0)); then
	echo "fuzz: no fuzz targets (func FuzzXxx) in the module yet: nothing to run"
	exit 0
fi

echo "fuzz: ${#targets[@]} target(s), ${FUZZTIME} each"
failed=()
for t in "${targets[@]}"; do
	pkg=${t% *}
	name=${t#* }
	args=(-run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME")
	if [[ -n $FUZZMINIMIZETIME ]]; then
		args+=(-fuzzminimizetime "$FUZZMINIMIZETIME")
	fi
	echo "fuzz: $GO test ${args[*]} $pkg"
	corpus="$pkg/testdata/fuzz/$name"
	before=$(count_files "$corpus")
	out=$(mktemp)
	if "$GO" test "${args[@]}" "$pkg" 2>&1 | tee "$out"; then
		rm -f "$out"
		continue
	fi
	# Go 1.26's fuzzing coordinator can fail a target at the end of
	# -fuzztime with a bare "context deadline exceeded" and no failing
	# input (golang/go#75804, fixed in Go 1.27): a race in its own
	# shutdown, not a finding. Such a run, and only such a run, is run
	# once more; a failure that wrote an input always counts.
	after=$(count_files "$corpus")
	if [[ $after -eq $before ]] && grep -q '^[[:space:]]*context deadline exceeded$' "$out"; then
		echo "fuzz: $name ended with Go's fuzzing-coordinator race (golang/go#75804: 'context deadline exceeded', no failing input written); running it once more"
		if "$GO" test "${args[@]}" "$pkg"; then
			rm -f "$out"
			continue
		fi
	fi
	rm -f "$out"
	failed+=("$pkg $name")
done

if ((${#failed[@]} > 0)); then
	echo "fuzz: ${#failed[@]} of ${#targets[@]} target(s) failed ($(took)):" >&2
	printf '  %s\n' "${failed[@]}" >&2
	echo "fuzz: the failing inputs are in the packages' testdata/fuzz/ (go test -run 'FuzzXxx/<file>' replays one)" >&2
	exit 1
fi
echo "fuzz: all ${#targets[@]} target(s) ran ${FUZZTIME} without a failure ($(took))"
