import xladdin


def test_exported_members():
    assert sorted(xladdin.__all__) == sorted(set(xladdin.__all__))
    for name in xladdin.__all__:
        assert hasattr(xladdin, name), name
    assert issubclass(xladdin.InputError, xladdin.XladdinError)
    assert issubclass(xladdin.EngineOffline, xladdin.EngineError)


def test_settings_reject_typos_and_name_the_env_var(tmp_path, monkeypatch):
    import pytest

    monkeypatch.setenv("XLADDIN_TIMEOUT", "soon")
    with pytest.raises(xladdin.ConfigError, match="setting timeout: .*XLADDIN_TIMEOUT"):
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
    assert (s.timeout, s.max_parallel) == (5, 2)  # overrides > env > file
