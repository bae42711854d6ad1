import re, sys
text = open("docs/DEPLOY.md").read()
heads = re.findall(r"^## +(.+?)\s*$", text, flags=re.M)
for need in ("Requirements", "Install", "Rollback"):
    if need not in heads:
        sys.exit(f"no section {need}")
parts = re.split(r"^## +", text, flags=re.M)[1:]
for p in parts:
    name, *rest = p.splitlines()
    words = " ".join(rest).split()
    if name.strip() in ("Requirements", "Install", "Rollback") and len(words) < 4:
        sys.exit(f"section {name} says next to nothing")
print("ok")
