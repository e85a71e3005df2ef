import __future__

import inspect

import xladdin
from xladdin.lazy import lazy

NOT_API = {"annotations": __future__.annotations, "lazy": lazy}  # what the package's own code imports


def test_exported_members():
    """``__all__`` is exactly what the package gives: each public name of ``dir(xladdin)`` (the names
    imported when first used included) that is not a submodule, and ``__version__``; a name given but not
    listed, or listed but not given, fails."""
    assert sorted(xladdin.__all__) == sorted(set(xladdin.__all__))
    for name, value in NOT_API.items():
        assert getattr(xladdin, name) is value, name
    given = {name for name in dir(xladdin)
             if not name.startswith("_") and name not in NOT_API and not inspect.ismodule(getattr(xladdin, name))}
    assert sorted(xladdin.__all__) == sorted(given | {"__version__"})
    assert issubclass(xladdin.InputError, xladdin.XladdinError)
    assert issubclass(xladdin.EngineOffline, xladdin.EngineError)


def test_settings_reject_typos_and_name_the_env_var(tmp_path, monkeypatch):
    import pytest

    monkeypatch.setenv("XLADDIN_TIMEOUT", "soon")
    with pytest.raises(xladdin.ConfigError, match="setting timeout: .*XLADDIN_TIMEOUT or XLADDIN_OPENAI_HTTP__TIMEOUT"):
        xladdin.Settings.load()
    monkeypatch.delenv("XLADDIN_TIMEOUT")
    cfg = tmp_path / "c.toml"
    cfg.write_text("timout = 3\n")
    monkeypatch.setenv("XLADDIN_CONFIG", str(cfg))
    with pytest.raises(xladdin.ConfigError, match="timout"):
        xladdin.Settings.load()
    cfg.write_text("timeout = 3\nmax_parallel = 8\n")
    monkeypatch.setenv("XLADDIN_MAX_PARALLEL", "2")
    s = xladdin.Settings.load({"timeout": 5})
    for section in (s.openai_http, s.embedded):  # the short names set every engine's
        assert (section.timeout, section.max_parallel) == (5, 2)  # overrides > env > file


def test_nested_settings_layer_with_short_names(tmp_path, monkeypatch):
    """A nested name (``XLADDIN_SAMPLING__MAX_TOKENS``, ``[embedded] n_ctx``) sets one field; within a layer
    it wins over the short name, and a higher layer wins either way."""
    import pytest

    from xladdin.settings import SamplingParams

    cfg = tmp_path / "c.toml"
    cfg.write_text("max_tokens = 300\ntimeout = 9\n[embedded]\nn_ctx = 2048\ntimeout = 30\n[sampling]\nseed = 7\n")
    env = {"XLADDIN_CONFIG": str(cfg), "XLADDIN_MAX_TOKENS": "400", "XLADDIN_SAMPLING__MAX_TOKENS": "450",
           "XLADDIN_OPENAI_HTTP__RETRIES": "5", "XLADDIN_ENGINE_URL": "http://gpu:8000/v1"}
    s = xladdin.Settings.load({"seed": 11}, env=env)
    assert s.sampling == SamplingParams(temperature=0.0, seed=11, max_tokens=450)
    assert (s.embedded.n_ctx, s.embedded.timeout, s.openai_http.timeout) == (2048, 30, 9)
    assert (s.openai_http.retries, s.openai_http.url) == (5, "http://gpu:8000/v1")
    assert xladdin.Settings.load({"timeout": 4}, env=env).embedded.timeout == 4  # a flag beats the file's [embedded]
    cfg.write_text("[embedded]\nn_ctxx = 2048\n")
    with pytest.raises(xladdin.ConfigError, match="embedded.n_ctxx"):
        xladdin.Settings.load(env={"XLADDIN_CONFIG": str(cfg)})
    with pytest.raises(xladdin.ConfigError, match="setting n_ctx: .*XLADDIN_N_CTX or XLADDIN_EMBEDDED__N_CTX"):
        xladdin.Settings.load(env={"XLADDIN_EMBEDDED__N_CTX": "12"})


def test_a_misspelt_nested_variable_is_named_with_its_closest_setting(caplog):
    xladdin.Settings.load(env={"XLADDIN_SAMPLING__MAX_TOKEN": "9", "XLADDIN_EMBEDDED__N_CTX": "2048"})
    warned = [r.getMessage() for r in caplog.records]
    assert warned == ["XLADDIN_SAMPLING__MAX_TOKEN is not a setting and is ignored; "
                      "did you mean XLADDIN_SAMPLING__MAX_TOKENS?"]
