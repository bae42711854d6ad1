import json, sys
got = json.load(open("report.json"))
want = {"total": 235, "by_region": {"north": 150, "south": 80, "east": 5}}
if got != want:
    sys.exit(f"{got} != {want}")
print("ok")
