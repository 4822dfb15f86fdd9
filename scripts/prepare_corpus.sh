#!/usr/bin/env bash
# Writes the `gpt` job's corpus: the King James Bible of Debian's bible-kjv package as plain
# text, one verse a line without its reference ("Ge1:1 In the beginning..." ->
# "In the beginning..."), to /var/cache/gradwire/kjv.txt (or $1). Idempotent: a complete
# file is kept. Needs bible-kjv (scripts/install_deps.sh installs it, then runs this).
set -euo pipefail

out="${1:-/var/cache/gradwire/kjv.txt}"
if [ -s "$out" ] && tail -n 1 "$out" | grep -q "^The grace of our Lord Jesus Christ be with you all. Amen.$"; then
  echo "prepare_corpus: $out present"
  exit 0
fi
if ! command -v bible >/dev/null; then
  echo "prepare_corpus: the 'bible' program is missing: apt-get install bible-kjv" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
bible -f Gen1:1-Rev22:21 | sed 's/^[^ ]* //' > "$tmp"
mv "$tmp" "$out"
echo "prepare_corpus: wrote $out ($(wc -c < "$out") bytes, $(wc -l < "$out") verses)"
