import sys
want = "level,count\nINFO,3\nWARN,2\nERROR,1\n"
got = open("summary.csv").read().replace("\r\n", "\n")
if got != want:
    sys.exit(f"{got!r} != {want!r}")
print("ok")
