"""The deployables in server/ (systemd units, the compose file) start commands the ``xladdin-server``
parser accepts, with profiles that exist and the API key from the environment, never argv."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import pytest
import yaml

from xladdin.server import cli

SERVER = Path(__file__).parent.parent / "server"
UNITS = sorted((SERVER / "systemd").glob("*.service"))


def unit_command(path: Path) -> list[str]:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str
    unit.read(path, encoding="utf-8")
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert Path(argv[0]).name == "xladdin-server", argv
    return argv[1:]


def compose_commands() -> list[list[str]]:
    compose = yaml.safe_load((SERVER / "compose.yaml").read_text(encoding="utf-8"))
    dockerfile = (SERVER / "Dockerfile.vllm").read_text(encoding="utf-8")
    assert 'ENTRYPOINT ["xladdin-server", "serve"]' in dockerfile
    return [["serve", *service["command"]] for service in compose["services"].values()]


@pytest.mark.parametrize("argv", [unit_command(u) for u in UNITS] + compose_commands(),
                         ids=[u.name for u in UNITS] + ["compose"])
def test_each_deployable_starts_a_command_the_server_accepts(argv, monkeypatch, capsys):
    assert not any("key" in a.lower() for a in argv)  # the key travels in the environment
    monkeypatch.setenv("XLADDIN_API_KEY", "k" * 32)
    assert cli.main([*argv, "--dry-run"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "--host 0.0.0.0" in out and ("vllm serve" in out or "xladdin.server.cpu_server" in out), out
    monkeypatch.delenv("XLADDIN_API_KEY")
    assert cli.main([*argv, "--dry-run"]) != 0  # bound beyond loopback: no key, no server


def test_there_are_units_for_both_servers():
    engines = {unit_command(u)[unit_command(u).index("--engine") + 1] for u in UNITS}
    assert engines == {"vllm", "cpu"}


def test_a_batch_invariant_server_gets_vllm_s_switch_in_its_environment(monkeypatch, capsys):
    """``--batch-invariant`` (or a profile's ``batch_invariant = true``): vLLM started with
    VLLM_BATCH_INVARIANT=1 in its environment, not in argv; other servers without it."""
    from xladdin.engine import profiles
    from xladdin.server import launcher

    started = []
    monkeypatch.setattr(launcher, "run_servers", lambda specs, **kw: started.append(specs) or [0])
    assert cli.main(["serve", "--profile", "qwen3-8b-h200", "--batch-invariant"]) == 0
    assert cli.main(["serve", "--profile", "qwen3-8b-h200"]) == 0
    (invariant,), (plain,) = started
    assert invariant.env["VLLM_BATCH_INVARIANT"] == "1" and "VLLM_BATCH_INVARIANT" not in " ".join(invariant.cmd)
    assert plain.env is None or "VLLM_BATCH_INVARIANT" not in plain.env
    assert "environment: VLLM_BATCH_INVARIANT=1" in capsys.readouterr().out
    assert profiles.server_env(profiles.get_profile("qwen3-8b-h200").model_copy(update={"batch_invariant": True})) \
        == {"VLLM_BATCH_INVARIANT": "1"}
