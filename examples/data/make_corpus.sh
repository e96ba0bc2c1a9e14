#!/bin/sh
# Regenerates examples/data/train.txt and examples/data/valid.txt from the
# King James Version text shipped by Debian (packages bible-kjv-text and
# bible-kjv, version 4.38). See README.md in this directory.
#
#   sh examples/data/make_corpus.sh          # writes next to this script
#   sh examples/data/make_corpus.sh OUTDIR   # writes into OUTDIR
#
# Needs: bible (apt-get install bible-kjv), sed, awk, sha256sum.
set -eu
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out"

if ! command -v bible >/dev/null 2>&1; then
    echo "make_corpus.sh: 'bible' not found; run: apt-get install -y bible-kjv" >&2
    exit 1
fi
ver=$(dpkg-query -W -f='${Version}' bible-kjv-text 2>/dev/null || echo unknown)
if [ "$ver" != "4.38" ]; then
    echo "make_corpus.sh: warning: bible-kjv-text is '$ver', README.md was made with 4.38;" \
         "the checksums may differ" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# -f turns pretty-printing off: one verse per line, each prefixed by its
# reference ("Ge1:1 In the beginning ..."). Stdin is /dev/null so the
# program does not wait for interactive commands.
bible -f 'Gen1:1-Rev22:21' </dev/null >"$tmp/raw.txt"

# Train: Genesis .. Acts (44 books). Valid: Romans .. Revelation (22 books),
# one contiguous held-out block, about 9% of the bytes.
# For each line: drop the reference, squeeze runs of spaces, strip trailing
# blanks and any CR; lines from "Rom1:1" onwards go to valid.
awk -v train="$tmp/train.txt" -v valid="$tmp/valid.txt" '
    $1 == "Rom1:1" { v = 1 }
    {
        sub(/\r$/, "")
        if ($1 !~ /^[1-3]?[A-Za-z]+[0-9]+:[0-9]+$/) {
            print "make_corpus.sh: unexpected line " NR ": " $0 > "/dev/stderr"
            exit 2
        }
        line = $0
        sub(/^[^ ]+ +/, "", line)
        gsub(/  +/, " ", line)
        sub(/ +$/, "", line)
        if (line == "") next
        print line > (v ? valid : train)
    }
' "$tmp/raw.txt"

# Sanity: both parts present, printable ASCII only.
for f in train valid; do
    [ -s "$tmp/$f.txt" ] || { echo "make_corpus.sh: empty $f.txt" >&2; exit 1; }
    if grep -q '[^ -~]' "$tmp/$f.txt"; then
        echo "make_corpus.sh: non-printable or non-ASCII byte in $f.txt" >&2; exit 1
    fi
done

mv "$tmp/train.txt" "$out/train.txt"
mv "$tmp/valid.txt" "$out/valid.txt"
(cd "$out" && wc -l -c train.txt valid.txt && sha256sum train.txt valid.txt)
