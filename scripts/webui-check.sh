#!/usr/bin/env bash
# The Web UI check: graft dev with its Web UI, one create that ends created
# and one that ends conflict, the UI's workflow list loaded in Debian's
# headless chromium, and the two runs' rows checked to show different
# statuses; a screenshot of the list is saved (docs/operations.md, "Finding
# failed operations in the Web UI").
#
#   GRAFT_WEBUI_SCREENSHOT=path   where the screenshot goes (default .cache/webui-workflows.png)
#
# Needs chromium (apt-get install chromium), Postgres (DATABASE_URL) and the
# pinned Temporal CLI (go run ./cmd/buildtools).
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
go run ./cmd/buildtools
exec go test -count=1 -tags webui -run TestWebUI -v ./cmd/starter
