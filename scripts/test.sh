#!/usr/bin/env bash
# graft's whole test suite, as CI runs it: build, vet, gofmt, workflowcheck,
# the pinned tools (built once into .bin/, beside the build), every test against the real servers
# (versitygw, MinIO, the Temporal dev server and, for cmd/internal/prodtier, the Temporal
# server and graft-worker processes are started by the tests themselves; Postgres from
# DATABASE_URL or 127.0.0.1:5432), and each fuzz target briefly.
#
#   FUZZTIME=5s   how long each fuzz target runs (0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZTIME="${FUZZTIME:-5s}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
mkdir -p .cache
log=.cache/test.log
: >"$log"

# cpu: the CPU seconds (user + system) of every finished child so far, from
# `times >.cache/times` run just before in this shell (in a subshell, times
# would see no children).
cpu() { awk 'NR == 2 {n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] }; printf "%d", n}' .cache/times; }
step() {
	times >.cache/times
	printf '\n==> %s  [%ds wall, %ss CPU]\n' "$*" "$SECONDS" "$(cpu)"
}

# Two slow set-ups need no compiled graft and mostly wait on the network or a
# linker, so they start first and run beside the build, vet and checks below:
# the pinned tools (built once into .bin/; log .cache/buildtools.log) and, for
# the Web UI check, Debian's chromium where we may install it (root, apt).
step "pinned tools and chromium: started in the background"
trap wait EXIT # a step that fails early still leaves no background build behind
go run ./cmd/buildtools >.cache/buildtools.log 2>&1 &
tools_pid=$!
chromium_pid=
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "installing Debian's chromium for the Web UI check (log: .cache/chromium-install.log)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >.cache/chromium-install.log 2>&1 &
	chromium_pid=$!
fi

step "go build ./..."
go build ./...

step "go vet ./..."
go vet ./...

step "gofmt"
unformatted=$(gofmt -l $(find . -name '*.go' -not -path './.bin/*' -not -path './.cache/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi

step "workflowcheck (workflow code is deterministic)"
# Pinned; its configuration is scripts/workflowcheck.yaml.
go run go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0 -config scripts/workflowcheck.yaml ./workflows/...

step "pinned tools (waiting for the background build)"
if ! wait "$tools_pid"; then
	cat .cache/buildtools.log; echo "building the pinned tools failed"; exit 1
fi
cat .cache/buildtools.log

# Four checks that run beside `go test` once the tools are ready, one after
# another in the background: the test phase leaves part of the second core
# idle, and the tool phase before it has none to spare. Their output goes to
# .cache/extras.out and is shown after go test's; the lines counted below go
# to .cache/extras.log. Each fuzz target fuzzes with one worker for FUZZTIME.
extras() {
	set +e
	local rc=0
	if [ "$FUZZTIME" != "0" ]; then
		echo "==> fuzz targets, $FUZZTIME each, one worker"
		while read -r file; do
			pkg="./$(dirname "$file")"
			for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
				echo "--- fuzz $pkg $target"
				ok=0
				for try in 1 2; do
					if go test -run='^$' -fuzz="^${target}\$" -fuzztime="$FUZZTIME" -parallel 1 "$pkg" >.cache/fuzz.out 2>&1; then
						ok=1; break
					fi
					# A crasher is written to testdata/fuzz and is a real failure; a fuzz
					# engine hiccup on a loaded machine (no input saved, e.g. "context
					# deadline exceeded" as -fuzztime ends) gets one retry.
					if [ "$try" = 2 ] || grep -q "Failing input written to" .cache/fuzz.out; then
						cat .cache/fuzz.out; break
					fi
					echo "(fuzz engine failed without a failing input; retrying once; its output:)"
					sed -e 's/--- FAIL/--- (engine hiccup)/' -e 's/^FAIL/(engine hiccup, retried) fail/' .cache/fuzz.out
				done
				if [ "$ok" = 1 ]; then
					echo "--- PASS: $target (fuzz $FUZZTIME)" | tee -a .cache/extras.log
				else
					echo "--- FAIL: $target (fuzz $FUZZTIME)" | tee -a .cache/extras.log
					rc=1
				fi
			done
		done < <(grep -lE '^func Fuzz' $(find . -name '*_test.go' -not -path './.bin/*' -not -path './.cache/*') | sed 's|^\./||' | sort)
	fi

	# A service in a module of its own (a replace points at this checkout): it
	# must build against the public client alone, and its real-stack test runs
	# graft dev on versitygw.
	echo "==> examples/service (its own module): build, vet, test"
	(cd examples/service && go build ./... && go vet ./... && go test -count=1 -timeout 15m -v ./...) 2>&1 | tee -a .cache/extras.log
	if [ "${PIPESTATUS[0]}" -ne 0 ]; then rc=1; fi

	# A merge check in a module of its own: a worker on its own task queue that a
	# merge into a protected branch starts as a child workflow; its real-stack
	# test runs graft dev and merges into a branch protected by it.
	echo "==> examples/checks (its own module): build, vet, test"
	(cd examples/checks && go build ./... && go vet ./... && go test -count=1 -timeout 15m -v ./...) 2>&1 | tee -a .cache/extras.log
	if [ "${PIPESTATUS[0]}" -ne 0 ]; then rc=1; fi

	# The Web UI check needs a real browser: Debian's chromium. Where it is not
	# installed the check is reported as not run, never as passed.
	echo "==> Web UI check (headless chromium)"
	if [ -n "$chromium_pid" ]; then
		while kill -0 "$chromium_pid" 2>/dev/null; do sleep 1; done # started by the parent shell
	fi
	if command -v chromium >/dev/null 2>&1; then
		go test -count=1 -tags webui -run TestWebUI -v ./cmd/starter 2>&1 | tee -a .cache/extras.log
		if [ "${PIPESTATUS[0]}" -ne 0 ]; then rc=1; fi
	else
		echo "Web UI check: NOT RUN (chromium is not installed; apt-get install chromium, then scripts/webui-check.sh)"
		if [ -n "$chromium_pid" ]; then tail -3 .cache/chromium-install.log; fi
	fi
	return "$rc"
}
step "fuzz targets, examples/service, examples/checks and the Web UI check: started in the background"
: >.cache/extras.log
extras >.cache/extras.out 2>&1 &
extras_pid=$!

# Every package, the seeded soak among them (cmd/internal/soak TestSoak,
# docs/testing.md): GRAFT_SOAK_SEEDS seeds (200) on each backend, many schedules
# at once against one stack, the oracle after each; it prints its totals.
# go test starts packages in the order named, two at a time: the longest
# (the soak, the workflows' real-server tiers, the CLI's end to end) go first so
# that the short ones fill the other slot instead of one long package running
# alone at the end. -vet=off: go vet ./... above already ran every analyzer on
# the same packages and their tests, so go test's own subset would only repeat it.
step "go test ./... (the soak: ${GRAFT_SOAK_SEEDS:-200} seeds on each backend)"
set +e
GRAFT_SOAK_SEEDS="${GRAFT_SOAK_SEEDS:-200}" go test -count=1 -vet=off -p 2 -parallel 4 -timeout 45m -v \
	./cmd/internal/soak ./workflows ./cmd/starter ./cmd/internal/prodtier ./... 2>&1 | tee -a "$log"
test_rc=${PIPESTATUS[0]}
set -e

step "fuzz targets, examples/service, examples/checks and the Web UI check (waiting for the background chain)"
extras_rc=0
wait "$extras_pid" || extras_rc=$?
cat .cache/extras.out
cat .cache/extras.log >>"$log"
if [ "$extras_rc" -ne 0 ]; then test_rc=1; fi

passed=$(grep -cE '^\s*--- PASS' "$log" || true)
failed=$(grep -cE '^\s*--- FAIL' "$log" || true)
echo
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
	echo "no test ran"
	exit 1
fi
times >.cache/times
echo "test command wall time: ${SECONDS}s (CPU of its children: $(cpu)s)"
echo "$passed passed, $failed failed"
if [ "$test_rc" -ne 0 ]; then
	exit 1
fi
