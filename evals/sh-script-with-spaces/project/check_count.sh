#!/bin/sh
set -e
d=$(mktemp -d)
printf 'a\nb\n' > "$d/two lines.txt"
out=$(sh ./count.sh "$d/two lines.txt")
test "$out" = "2 $d/two lines.txt"
echo ok
