"""The peer bench's --first-call-only --merge-into path (bench/peers.py), torch-free: a synthetic
results.json gets a new first_call section (through the CLI with --first-call-from, which merges an
earlier run's first_call.json without measuring), and the test checks that only that section and
the table's first-call block change (every other section of results.json and every other line of
table.md byte-identical), that merging a file's own section back reproduces it byte for byte, and
that the options are refused where they make no sense. Needs only the standard library."""

import importlib.util
import json
import pathlib
import subprocess
import sys

PEERS = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers.py"


def _peers():
    spec = importlib.util.spec_from_file_location("peers_under_test", PEERS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row(name, fam):
    arm = {"med_s_f": 1e-4, "min_s_f": 9e-5, "med_s_fb": 3e-4, "min_s_fb": 2.9e-4, "over_floor_f": 2.0,
           "over_floor_fb": 3.0, "wall_s_f": 1.2e-4, "wall_s_fb": 3.5e-4, "ulp": {"out": 1.0, "lora_up": 2.0},
           "timing_fb": "graph", "first_call_in_process_s": 0.01}
    return {"case": {"fam": fam}, "name": name, "arms": {"lyco": dict(arm), "eager": dict(arm, lyco_speedup_f=0.9)},
            "agree": {"ok": True, "worst_fraction_of_bound": 0.25}, "lyco_path": "fused cuda", "floor": {"f_s": 5e-5}}


def _doc(first_call):
    env = {"date": "2026-11-29 22:42 UTC", "torch": "2.11", "python": "3.12.3", "dtype": "bf16",
           "device_kind": "cuda", "triton": "3.6.0", "lycoris": "4.1.3", "lyco_library": "0.1.0",
           "lyco_commit": "abc1234", "device": "NVIDIA H200", "cuda": "13.0", "driver": "580"}
    return {"env": env, "ceilings": {"copy_Bps": 4e12, "mm_flops": 7e14, "how": "measured"},
            "arms": ["lyco", "eager"], "reps": 30, "flush_mb": 256,
            "rows": [_row("lora_merge 4096x4096 r32", "lora_merge")], "first_call": first_call,
            "summary": {"lora_merge": {"rows": 1, "lyco_over_floor_f": 2.0}}, "notes": ["rows 2-3 not run"],
            "argv": ["--device", "cuda"], "complete": True}


OLD_FC = {"jobs_at_once": 6, "timeout_s": 120, "cases": {"lora_bypass": "T4096 2048x2048 r16"},
          "results": {"lora_bypass": {"lyco": {"error": "not run: --time-limit reached"},
                                      "eager": {"error": "killed at --time-limit after 8 s"}}}}
NEW_FC = {"jobs_at_once": 1, "timeout_s": 300, "complete": True,
          "cases": {"lora_bypass": "T4096 2048x2048 r16", "ia3_bypass": "T4096 2048x2048"},
          "results": {"lora_bypass": {"lyco": {"import_s": 3.5, "first_s": 0.25, "second_s": 0.002},
                                      "eager": {"import_s": 3.25, "first_s": 0.5, "second_s": 0.003}},
                      "ia3_bypass": {"lyco": {"import_s": 3.0, "first_s": 0.125, "second_s": 0.001},
                                     "eager": {"error": "timed out after 300 s"}}},
          "run": {"date": "2026-11-30 01:00 UTC", "device": "NVIDIA H200", "torch": "2.11", "triton": "3.6.0",
                  "lycoris": "4.1.3", "lyco_commit": "def5678", "dtype": "bf16",
                  "argv": ["--first-call-only", "--arms", "lyco,eager"]}}


def _write(path, obj):
    path.write_text(json.dumps(obj, indent=1))  # as peers.py's save() writes results.json


def _cli(*argv):
    return subprocess.run([sys.executable, str(PEERS), *argv], capture_output=True, text=True, timeout=120)


def test_merge_replaces_only_the_first_call_section(tmp_path):
    P = _peers()
    src = tmp_path / "old" / "results.json"
    src.parent.mkdir()
    _write(src, _doc(OLD_FC))
    P.write_table(_doc(OLD_FC), str(tmp_path / "old" / "table.md"))
    fc = tmp_path / "first_call.json"
    _write(fc, NEW_FC)
    out = tmp_path / "merged"
    r = _cli("--first-call-only", "--merge-into", str(src), "--first-call-from", str(fc), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    merged_text = (out / "results.json").read_text()
    merged = json.loads(merged_text)
    assert merged["first_call"] == NEW_FC
    # every other section byte-identical: the file is the old one with the section swapped
    assert merged_text == json.dumps(_doc(NEW_FC), indent=1)
    old_doc = json.loads(src.read_text())
    for k in old_doc:
        if k != "first_call":
            assert json.dumps(merged[k], indent=1) == json.dumps(old_doc[k], indent=1), k
    # table.md: the lines outside the first-call block unchanged, the block holds the new section
    old_t = (tmp_path / "old" / "table.md").read_text().splitlines()
    new_t = (out / "table.md").read_text().splitlines()
    head = [i for i, ln in enumerate(old_t) if ln.startswith("## First call")][0]
    tail = [i for i, ln in enumerate(old_t) if ln.startswith("## Summary")][0]
    assert new_t[:head] == old_t[:head]
    n_tail = len(old_t) - tail
    assert new_t[-n_tail:] == old_t[-n_tail:]
    block = "\n".join(new_t[head:len(new_t) - n_tail])
    assert "1 processes at a time" in block and "separate `--first-call-only` run" in block
    assert "3.5 + 0.25 s (2.00 ms)" in block and "error: timed out after 300 s" in block
    assert "ia3_bypass | T4096 2048x2048" in block
    assert "not run: --time-limit" not in block
    # the input folder is left alone
    assert json.loads(src.read_text())["first_call"] == OLD_FC


def test_merging_a_files_own_section_reproduces_it(tmp_path):
    P = _peers()
    src = tmp_path / "results.json"
    _write(src, _doc(OLD_FC))
    P.write_table(_doc(OLD_FC), str(tmp_path / "table.md"))
    before = (src.read_text(), (tmp_path / "table.md").read_text())
    out = tmp_path / "again"
    out.mkdir()
    P.merge_first_call(str(src), json.loads(src.read_text())["first_call"], str(out))
    assert ((out / "results.json").read_text(), (out / "table.md").read_text()) == before


def test_merge_options_are_refused_out_of_place(tmp_path):
    src = tmp_path / "results.json"
    _write(src, _doc(OLD_FC))
    r = _cli("--merge-into", str(src))
    assert r.returncode == 2 and "--first-call-only" in r.stderr
    r = _cli("--first-call-only", "--first-call-from", str(src))
    assert r.returncode == 2 and "--merge-into" in r.stderr
    bad = tmp_path / "bad.json"
    _write(bad, {"rows": []})
    r = _cli("--first-call-only", "--merge-into", str(bad), "--first-call-from", str(src), "--out", str(tmp_path))
    assert r.returncode != 0 and "not a peers.py results.json" in r.stderr
