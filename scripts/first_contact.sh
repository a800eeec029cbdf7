#!/usr/bin/env bash
# The README's first block, typed in order by a newcomer on a fresh clone: every command must work
# as written, with nothing set up beforehand. `make test` is left out (CI runs it on its own).
# Usage: bash scripts/first_contact.sh [WORK_DIR]   (default: a new temporary folder, removed after)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d)}"
[ -n "${1:-}" ] || trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/parabench"
cd "$work/parabench"
# The README's first ```sh block, comments dropped; `make test` left to CI's own step.
block="$(awk '/^```sh$/ {inside=1; next} inside && /^```$/ {exit} inside' README.md | sed 's/ *#.*$//' | grep -v '^make test$')"
[ -n "$block" ] || { echo "first_contact: README.md has no \`\`\`sh block" >&2; exit 1; }
printf '%s\n' "--- the README's first commands, in order:" "$block"
# One shell, as a newcomer's terminal: `. .venv/bin/activate` holds for the lines after it.
printf 'set -euxo pipefail\n%s\n' "$block" > "$work/first-block.sh"
env -u VIRTUAL_ENV bash "$work/first-block.sh" > "$work/out.txt" 2>&1 || { status=$?; cat "$work/out.txt"; \
  echo "first_contact: a command of the README's first block failed (exit $status): it must work as written" >&2; exit 1; }
cat "$work/out.txt"
# An answer, whatever it says: on a busy machine every case may come back disturbed, which the
# answer says instead of recommending.
grep -qE "Recommended:|Unjudged:|No configuration can be recommended" "$work/out.txt" \
  || { echo "first_contact: no answer printed" >&2; exit 1; }
[ -s plots/REPORT.md ] || { echo "first_contact: make plot wrote no plots/REPORT.md" >&2; exit 1; }
echo "first_contact: the README's first block ran in order on a fresh clone"
