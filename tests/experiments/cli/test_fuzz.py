"""A fuzz pass over the CLI: every subcommand with missing, malformed and out-of-range
arguments and unreadable or corrupt files answers with a non-zero exit and one clear
error line, never a traceback. Run in-process (``main(argv)``) to stay fast."""

from __future__ import annotations

from pathlib import Path

import pytest

from flashtune.experiments.cli.main import main


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Corrupt and unreadable inputs, each a path."""
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "b2_h8_n1024_d64_causal_bfloat16.jsonl").write_text('{"config": {"BLOCK_M": 64}, "oops"\n')
    (tmp_path / "spec.json").write_text("{not json")
    (tmp_path / "study.toml").write_text("hardware = [unclosed\n")
    (tmp_path / "store.json").write_bytes(b"\x80\x04\x95 pickle, not JSON")
    (tmp_path / "a_file").write_text("x")
    unreadable = tmp_path / "unreadable.jsonl"
    unreadable.write_text("{}\n")
    unreadable.chmod(0)
    return {"dir": str(tmp_path), "corrupt": str(corrupt), "table": str(corrupt / "b2_h8_n1024_d64_causal_bfloat16.jsonl"),
            "spec": str(tmp_path / "spec.json"), "toml": str(tmp_path / "study.toml"),
            "store": str(tmp_path / "store.json"), "file": str(tmp_path / "a_file"),
            "unreadable": str(unreadable), "missing": str(tmp_path / "missing")}


W = "2,8,1024,64,causal"
#: A study that would run (a shipped table, 2 trials) if the one bad argument were accepted.
RUNS = ["--workload", "4,32,4096,128", "--objective", "replay", "--trials", "2", "--no-progress"]
CASES = [
    # argparse: missing, malformed
    [], ["frobnicate"], ["tune", "--trials"], ["tune", "--trials", "many"], ["tune", "--seed", "1.5"],
    ["tune", "--objective", "quantum"], ["sweep", "--limit", "x"], ["export"], ["export", "table:x"],
    ["ui", "--port", "http"], ["compare", "--seeds", "lots"], ["transfer", "--seeds", "-"], ["study"],
    # out of range
    ["tune", "--trials", "-3", "--workload", W], ["tune", "--workers", "0", "--workload", W],
    ["tune", "--workload", "0,8,1024,64"], ["tune", "--workload", "2,8,-1,64"], ["tune", "--workload", "2,8,1024,100"],
    ["tune", "--max-seconds", "-1", "--workload", W, "--objective", "replay", "--replay-dir", "{corrupt}"],
    ["sweep", "--workload", W, "--limit", "-1", "--interpret", "--hardware", "h200", "--out", "{dir}"],
    ["sweep", "--workload", W, "--timeout", "-5", "--interpret", "--hardware", "h200", "--out", "{dir}"],
    ["sweep", "--workload", W, "--where", "BLOCK_M", "--interpret", "--hardware", "h200"],
    ["sweep"], ["sweep", "--workload", "nonsense"],
    ["ui", "--port", "99999", "--tracking-uri", "sqlite:///{dir}/none.db"], ["ui", "--port", "-1"],
    ["compare", "--seeds", "0", "--tables", "{table}"], ["compare", "--budget", "-1", "--tables", "{table}"],
    ["compare", "--jobs", "0", "--tables", "{table}"], ["compare", "--hardware", "voodoo2"],
    ["compare", "--strategies", "nope", "--tables", "{table}"],
    ["transfer", "--seeds", "0"], ["transfer", "--pairs", "999"], ["transfer", "--pairs", "x,y"],
    ["transfer", "--jobs", "0"],
    # unreadable or corrupt files
    ["tune", "--objective", "replay", "--workload", W, "--replay-dir", "{corrupt}"],
    ["tune", "--objective", "replay", "--workload", W, "--replay-dir", "{missing}"],
    ["tune", "--objective", "replay", "--workload", W, "--replay-dir", "{file}"],
    ["tune", "--hardware", "{spec}", "--workload", W], ["tune", "--hardware", "{missing}.json", "--workload", W],
    ["tune", "--prior-from", "store:{store}", "--workload", W], ["tune", "--prior-from", "table:{unreadable}"],
    ["tune", "--prior-from", "table:{table}", "--workload", W], ["tune", "--prior-from", "gopher:x"],
    ["sweep", "--workload", W, "--hardware", "{spec}", "--interpret"],
    ["sweep", "--workload", W, "--interpret", "--hardware", "h200", "--out", "{file}"],
    ["export", "table:{table}", "--to", "{dir}/out.json"], ["export", "table:{unreadable}", "--to", "{dir}/o.json"],
    ["export", "table:{missing}", "--to", "{dir}/o.json"], ["export", "mlflow:abc", "--to", "{dir}/o.json",
                                                               "--tracking-uri", "sqlite:///{missing}.db"],
    ["export", "optuna:x", "--to", "{dir}/o.json", "--storage", "sqlite:///{missing}.db"],
    ["export", "nonsense", "--to", "{dir}/o.json"], ["export", "table:{table}", "--to", "{missing}/o.json"],
    ["export", "table:{table}", "--to", "{dir}"], ["export", "table:{file}", "--to", "{store}"],
    ["ui", "--tracking-uri", "gopher://x"], ["ui", "--tracking-uri", ""],
    ["tune", "--tracking-uri", "sqlite:///{missing}/x.db", "--workload", W],
    ["tune", "--storage", "journal:{missing}/j.log", "--workload", W], ["tune", "--option", "=3", "--workload", W],
    ["tune", "--study-name", "", *RUNS], ["tune", "--study-name", " ", *RUNS], ["tune", "--heartbeat", "-1", *RUNS],
    ["tune", "--timeout", "0", *RUNS], ["tune", "--precompile", "-2", *RUNS], ["tune", "--heartbeat", "nan", *RUNS],
    ["compare", "--tables", "{table}", "--json", "{missing}/r.json"], ["compare", "--tables", "{table}", "--out", "{file}"],
    ["compare", "--option", "tpe.nope=1", "--tables", "{table}"], ["compare", "--priors", "all"],
    ["compare", "--tables", "{table}"], ["compare", "--tables", "{unreadable}"], ["compare", "--tables", "{missing}"],
    ["transfer", "--tables", "{missing}"], ["transfer", "--tables", "{file}"],
    ["study", "voodoo2"], ["study", "{toml}"], ["study", "{missing}.toml"],
]


@pytest.mark.parametrize("argv", CASES, ids=lambda argv: " ".join(argv) or "(none)")
def test_bad_input_is_one_clear_line(argv: list[str], files, capsys, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.chdir(files["dir"])
    argv = [a.format(**files) for a in argv]
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert code not in (0, None), err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("usage:", " "))]
    assert len(lines) == 1 and "error" in lines[0], err


#: A table a hostile or unlucky file system hands over, and what the one line says of it.
BAD_TABLES = {
    "deeply nested": (b"[" * 5000 + b"\n", "line 1: not valid JSON (nested too deeply)"),
    "not UTF-8": (b'\n\n{"config": "\xff"}\n', "line 3: not UTF-8 text (invalid start byte at byte 12 of the line)"),
    "a time of 5000 digits": (b'{"median_ms": ' + b"9" * 5000 + b"}\n",
                              "line 1: not valid JSON (a number of 5000 digits; Python reads at most 4300)"),
    "a row without config": (b'{"workload": null, "status": "ok"}\n', "line 1: Measurement: missing field(s) ['config']"),
    "a list, not a row": (b"[1, 2]\n", "line 1: not a measurement (a JSON list, not an object)"),
}


@pytest.mark.parametrize("command", ["compare", "tune"])
@pytest.mark.parametrize("name", list(BAD_TABLES))
def test_a_bad_table_is_one_line_naming_the_file(name, command, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "tables"
    folder.mkdir()
    table = folder / "b2_h8_n1024_d64_causal_bfloat16.jsonl"
    data, problem = BAD_TABLES[name]
    table.write_bytes(data)
    argv = (["compare", "--tables", str(folder), "--seeds", "1", "--budget", "5", "--strategies", "random",
             "--priors", "none", "--jobs", "1"] if command == "compare" else
            ["tune", "--objective", "replay", "--workload", W, "--replay-dir", str(folder), "--trials", "2",
             "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"error: replay table {table}, {problem}" in err, err


@pytest.mark.parametrize("name", ["deeply nested", "a time of 5000 digits"])
def test_a_bad_kernel_tuner_file_is_one_line_naming_the_file(name, tmp_path, capsys) -> None:
    path = tmp_path / "space.json"
    path.write_bytes({"deeply nested": b"[" * 5000,
                      "a time of 5000 digits": b'{"tune_params": {"a": [1]}, "cache": {"1": {"a": 1, "time": '
                                               + b"9" * 5000 + b"}}}"}[name])
    assert main(["compare", "--tables", str(path), "--seeds", "1", "--budget", "5", "--priors", "none"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {path}: not valid JSON (" in err, err
