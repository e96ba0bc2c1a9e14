#!/bin/sh
# Regenerates examples/data/fortunes_train.tsv and fortunes_test.tsv, a small
# text-classification set: fortune cookies labelled by their Debian fortunes
# file (0 computers, 1 politics, 2 science, 3 startrek). See README.md here.
#
#   sh examples/data/make_fortunes.sh          # writes next to this script
#   sh examples/data/make_fortunes.sh OUTDIR   # writes into OUTDIR
#
# Needs: the Debian package `fortunes` (apt-get install fortunes), awk, sha256sum.
set -eu
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
src=/usr/share/games/fortunes
mkdir -p "$out"

for f in computers politics science startrek; do
    if [ ! -f "$src/$f" ]; then
        echo "make_fortunes.sh: $src/$f not found; run: apt-get install -y fortunes" >&2
        exit 1
    fi
done
ver=$(dpkg-query -W -f='${Version}' fortunes 2>/dev/null || echo unknown)
if [ "$ver" != "1:1.99.1-7.3" ]; then
    echo "make_fortunes.sh: warning: fortunes is '$ver', README.md was made with 1:1.99.1-7.3;" \
         "the checksums may differ" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/train.tsv"
: >"$tmp/test.tsv"

# Entries end at a line holding only "%". Each entry's whitespace (newlines,
# tabs, runs of spaces) is squeezed to one space and trimmed; entries of 20 to
# 300 bytes are kept, the first 250 of each file in file order; every fifth
# kept entry (the 5th, 10th, ...) goes to the test set.
label=0
for f in computers politics science startrek; do
    awk -v label="$label" -v train="$tmp/train.tsv" -v test="$tmp/test.tsv" '
        function flush() {
            t = text
            gsub(/[ \t\r]+/, " ", t)
            sub(/^ /, "", t)
            sub(/ $/, "", t)
            if (length(t) >= 20 && length(t) <= 300 && kept < 250) {
                kept++
                print label "\t" t >> (kept % 5 == 0 ? test : train)
            }
            text = ""
        }
        $0 == "%" { flush(); next }
        { text = text " " $0 }
        END { if (text != "") flush() }
    ' "$src/$f"
    label=$((label + 1))
done

for f in train test; do
    if grep -q "$(printf '\t').*$(printf '\t')" "$tmp/$f.tsv"; then
        echo "make_fortunes.sh: a tab inside a text of $f.tsv" >&2; exit 1
    fi
done
mv "$tmp/train.tsv" "$out/fortunes_train.tsv"
mv "$tmp/test.tsv" "$out/fortunes_test.tsv"
(cd "$out" && wc -l -c fortunes_train.tsv fortunes_test.tsv && cut -f1 fortunes_train.tsv | sort | uniq -c &&
 sha256sum fortunes_train.tsv fortunes_test.tsv)
