import re, sys
text = open("CHANGELOG.md").read()
versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", text, flags=re.M)
if versions != ["1.3.0", "1.2.0", "1.1.0"]:
    sys.exit(f"versions {versions}")
new = text.split("## [1.3.0]", 1)[1].split("\n## [1.2.0]", 1)[0]
if not re.search(r"### Added\n- .*--json", new):
    sys.exit("no Added item for --json")
print("ok")
