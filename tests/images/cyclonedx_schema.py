"""Validate a CycloneDX JSON file with cyclonedx-python-lib's own strict validator.

The validator needs jsonschema and referencing, which the tools venv (where the library lives)
does not hold, while the newest release's test layer does. So it runs in a subprocess: an
interpreter with jsonschema (this one, else the newest release's cpu env, which
`./noxw -s test` builds) with the tools venv's site-packages appended to its path for the
library and the CycloneDX schema files it ships.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

from pax.paths import ROOT
from pax.releases import catalog

_VALIDATE = """
import sys
sys.path.append(sys.argv[1])
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(open(sys.argv[2]).read(),
                                                            all_errors=True)
for error in errors or ():
    print(error)
sys.exit(1 if errors else 0)
"""


def _tools_site() -> Path:
    found = sorted((ROOT / ".tools" / "venv" / "lib").glob("python3*/site-packages/cyclonedx"))
    assert found, f"no cyclonedx-python-lib under {ROOT}/.tools/venv: run ./noxw -l once"
    return found[0].parent


def _python_with_jsonschema() -> str:
    if importlib.util.find_spec("jsonschema") and importlib.util.find_spec("referencing"):
        return sys.executable
    newest = ROOT / ".venv" / f"pax-{catalog.newest().version}-cpu" / "bin" / "python"
    assert newest.exists(), f"no interpreter with jsonschema: build {newest} (./noxw -s test)"
    return str(newest)


def errors(path: Path) -> list[str]:
    """Schema violations of the CycloneDX 1.6 JSON at path (empty: valid)."""
    r = subprocess.run(
        [_python_with_jsonschema(), "-I", "-c", _VALIDATE, str(_tools_site()), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 1), r.stderr[-2000:]
    return r.stdout.splitlines()
