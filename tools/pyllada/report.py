"""Writing the JSON reports the tools that run pyllada (train/answers.py, authors/run.py) make."""
import json


def write_json(res, out):
    """Write res as JSON (indent 1) to stdout when out is "-", else to the file out with a final
    newline; True when it went to a file."""
    s = json.dumps(res, indent=1)
    if out == "-":
        print(s)
        return False
    with open(out, "w") as f:
        f.write(s + "\n")
    return True
