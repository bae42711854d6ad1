#!/bin/sh
set -e
d=$(mktemp -d)
printf 'x\n' > "$d/one  two	three.txt"
printf 'a\nb\nc\n' > "$d/-dash.txt"
printf '' > "$d/*.txt"
out=$(cd "$d" && sh "$OLDPWD/count.sh" "one  two	three.txt" ./-dash.txt '*.txt')
want=$(printf '1 one  two\tthree.txt\n3 ./-dash.txt\n0 *.txt')
test "$out" = "$want"
echo ok
