import subprocess, sys
for name in ["Ada", "Grace Hopper", "x"]:
    out = subprocess.run([sys.executable, "greet.py", name], capture_output=True, text=True).stdout
    if out.strip() != f"hello, {name}":
        sys.exit(f"greet.py {name!r} printed {out!r}")
print("ok")
