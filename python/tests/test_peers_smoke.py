"""Smoke test of the peer bench (bench/peers.py): one quick row (LoRA merge, 512×512, rank 8) on
the CPU with the lyco, eager and torch.compile arms, end to end in a subprocess: exit status 0,
table.md and results.json written, every arm timed, lyco's result within the dtype budget of
LyCORIS's eager result, and the LyCORIS-kernel arm reported as skipped for want of a GPU.
Skipped (with the reason) when torch, lycoris-lora or liblyco cannot be imported."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the peer bench needs torch")
try:
    import lycoris  # noqa: F401
except Exception as e:  # noqa: BLE001 (absent, or a dependency of it missing: skip, saying which)
    pytest.skip("the peer bench needs lycoris-lora (LyCORIS 4.x) importable: %s: %s"
                % (type(e).__name__, e), allow_module_level=True)

PEERS = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers.py"


def _lyco_loads():
    try:
        import lyco
        lyco.lib()
        return None
    except Exception as e:  # noqa: BLE001 (any load failure is a reason to skip)
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def test_one_quick_row_on_cpu(tmp_path):
    why = _lyco_loads()
    if why:
        pytest.skip("liblyco does not load: " + why)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = [sys.executable, str(PEERS), "--device", "cpu", "--quick", "--only", "lora_merge",
           "--arms", "lyco,eager,compile,lycoris", "--reps", "2", "--no-first-call",
           "--out", str(tmp_path)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "table.md").exists()
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["complete"] and len(doc["rows"]) == 1
    row = doc["rows"][0]
    assert row["agree"]["ok"], row["agree"]
    for arm in ("lyco", "eager", "compile"):
        a = row["arms"][arm]
        assert a["med_s_f"] > 0 and a["med_s_fb"] > 0, (arm, a)
        assert a["ulp"]["out"] < 8, (arm, a["ulp"])
    assert row["arms"]["lycoris"]["error"].startswith("skipped: no GPU")
    assert row["lyco_path"].startswith("fused")
