"""``xladdin nightly``: two nights in an empty folder, the cron and systemd lines of docs/nightly.md as printed;
and the night's inputs refused in one line naming the file (no traceback)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from kit import run_cli
from test_documents import TINY_MAX_TOKENS, cli
from test_nightly import LAST_NIGHT, write_csv

README = Path(__file__).resolve().parents[1] / "docs" / "nightly.md"  # where the cron and systemd lines are
BIN = "/srv/xladdin/.venv/bin/xladdin"
pytestmark = pytest.mark.slow  # whole nights through the CLI


def night(tmp_path, tiny_model_path, pool, day, *extra):
    return cli(["nightly", str(pool), "--dir", str(tmp_path / "nights"), "--date", day, *extra], tiny_model_path,
               tmp_path)


def test_night_one_writes_its_report_and_night_two_what_changed(tiny_model_path, tmp_path):
    pool = write_csv(tmp_path / "pool.csv", LAST_NIGHT)
    r = night(tmp_path, tiny_model_path, pool, "2021-05-06")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "night 1" in r.stdout and (tmp_path / "nights" / "2021-05-06.xlsx").is_file()
    tonight = [row[:] for row in LAST_NIGHT]
    tonight[0][4] = "2"  # ROE 20 → 2: 低 → 高
    write_csv(pool, tonight)
    r = night(tmp_path, tiny_model_path, pool, "2021-05-07")
    assert r.returncode == 4, r.stderr[-2000:]
    changes = json.loads((tmp_path / "nights" / "2021-05-07.changes.json").read_text(encoding="utf-8"))
    assert changes["changed"] == 1 and changes["rows"][0]["code"] == "600001.SH"
    assert changes["old"].endswith("2021-05-06.xlsx") and "since 2021-05-06.xlsx" in r.stdout
    # the same night again compares with the night before, not with itself
    assert night(tmp_path, tiny_model_path, pool, "2021-05-07").returncode == 4


def readme_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    cron = re.search(r"```cron\n(?:#.*\n)*\S+ \S+ \S+ \S+ \S+\s+(.+)\n```", text).group(1)
    unit = re.search(r"```ini\n# xladdin-nightly\.service\n(.*?)```", text, re.S).group(1)
    workdir = re.search(r"^WorkingDirectory=(.+)$", unit, re.M).group(1)
    start = re.search(r"^ExecStart=(.+)$", unit, re.M).group(1)
    success = re.search(r"^SuccessExitStatus=(.+)$", unit, re.M).group(1).split()
    assert success == ["1", "4", "5"]
    return [cron, f"cd {workdir} && {start}"]


def test_the_readme_s_cron_and_systemd_lines_run_as_printed_two_nights(tiny_model_path, tmp_path):
    commands = readme_commands()
    assert all(f"{BIN} nightly" in c for c in commands)
    xladdin = tmp_path / "xladdin"  # the README's installed command: this interpreter's
    xladdin.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m xladdin.cli.main \"$@\"\n")
    xladdin.chmod(0o755)
    env = dict(os.environ, XLADDIN_MODEL=str(tiny_model_path), XLADDIN_CACHE_DIR=str(tmp_path / "cache"),
               XLADDIN_MAX_TOKENS=str(TINY_MAX_TOKENS))
    for n, command in enumerate(commands):
        home = tmp_path / f"screen{n}"
        (home / "annual").mkdir(parents=True)
        write_csv(home / "pool.csv", LAST_NIGHT)
        line = command.replace("/srv/screen", str(home)).replace(BIN, str(xladdin))
        first = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr[-2000:]
        (home / "reports" / os.listdir(home / "reports")[0]).rename(home / "reports" / "2000-01-01.xlsx")
        second = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0 and "no changes" in second.stdout and "since 2000-01-01.xlsx" in second.stdout, \
            second.stdout + second.stderr[-2000:]
        assert len(list((home / "reports").glob("*.changes.json"))) == 1


def test_the_night_s_inputs_refused_in_one_line(tiny_model_path, tmp_path):
    pool = write_csv(tmp_path / "pool.csv", LAST_NIGHT)
    out = tmp_path / "last.json"
    r = cli(["screen", str(pool), "-o", str(out)], tiny_model_path, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    # diff -o naming one of its inputs: refused, last night's report untouched
    before = out.read_bytes()
    r = run_cli("diff", out, out, "-o", out)
    assert r.returncode == 2 and "one of the reports compared" in r.stderr and out.read_bytes() == before
    # a highlights report is no night before
    notes = tmp_path / "notes.csv"
    notes.write_text("代码,名称,财报摘要\n600001,甲,营业收入12亿元，同比增长10%。\n", encoding="utf-8")
    hl = tmp_path / "hl.json"
    assert cli(["highlights", str(notes), "-o", str(hl)], tiny_model_path, tmp_path).returncode in (0, 1)
    for r in (run_cli("diff", hl, out),
              cli(["screen", str(pool), "-o", str(tmp_path / "x.json"), "--compare", str(hl)], tiny_model_path,
                  tmp_path)):
        assert r.returncode == 2 and "hl.json: not a screen report" in r.stderr and "Traceback" not in r.stderr
    # --replay: its pool moved; its rules not rules; its run not a table
    saved = json.loads(out.read_text(encoding="utf-8"))
    pool.rename(tmp_path / "moved.csv")
    r = cli(["screen", "--replay", str(out)], tiny_model_path, tmp_path)
    assert r.returncode == 2 and "pool.csv, which is not there now" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "moved.csv").rename(pool)
    saved["run"]["rules"]["pe_limit"] = "abc"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
    r = cli(["screen", "--replay", str(bad)], tiny_model_path, tmp_path)
    assert r.returncode == 2 and "recorded rule pe_limit" in r.stderr and "Traceback" not in r.stderr
    saved["run"] = "a string"
    bad.write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
    r = cli(["screen", "--replay", str(bad)], tiny_model_path, tmp_path)
    assert r.returncode == 2 and "no screen run recorded" in r.stderr and "Traceback" not in r.stderr
