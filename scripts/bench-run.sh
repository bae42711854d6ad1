#!/usr/bin/env bash
# Wall time of a whole `loop run`: a 3-step scripted task (two writes and a
# finish, one check) in a fresh project each time, two builds side by side
# in one hyperfine run.
# Usage: scripts/bench-run.sh OLD_LOOP NEW_LOOP [RUNS]   (default 30)
set -euo pipefail
old=$(realpath "$1")
new=$(realpath "$2")
runs=${3:-30}
command -v hyperfine >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/script.yaml" <<'YAML'
turns:
  - calls:
      - {tool: write_file, args: {path: a.txt, content: "a\n"}}
  - calls:
      - {tool: write_file, args: {path: b.txt, content: "b\n"}}
  - calls:
      - {tool: finish, args: {summary: done}}
YAML
cat > "$dir/run.sh" <<SH
#!/usr/bin/env bash
set -e
p=\$(mktemp -d "$dir/p.XXXXXX")
"\$1" run "write a and b" --check "test -f b.txt" --model "scripted:$dir/script.yaml" --project "\$p" >/dev/null
rm -rf "\$p"
SH
chmod +x "$dir/run.sh"
echo "- $(date -u +%Y-%m-%d), $(uname -sr), $(nproc) cores, user $(id -un), $(hyperfine --version)"
echo
hyperfine -N -w 3 -r "$runs" --export-markdown "$dir/out.md" --style none \
  -n "before: $old" "$dir/run.sh $old" \
  -n "after: $new" "$dir/run.sh $new" >/dev/null 2>&1
cat "$dir/out.md"
