import sys

print("checking: 2 rows invalid")
print("row 3: missing id", file=sys.stderr)
sys.exit(3)
