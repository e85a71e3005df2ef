import os

import pytest

from xladdin.core.cache import Cache, cache_key
from xladdin.tasks import ScreenTask

BASE = dict(
    task="screen",
    task_version="screen-1",
    task_config={"max_text_chars": 1200},
    model="m@1",
    params={"temperature": 0.0, "seed": 42, "max_tokens": 512},
)


def inp(**kw):
    row = {"code": "600519", "name": "贵州茅台", "roe": 30, "pe_ttm": 20, "report_text": "营收1505亿元"}
    row.update(kw)
    return ScreenTask().parse(row)


def test_key_is_stable_and_canonical():
    k = cache_key(**BASE, inp=inp())
    assert k == cache_key(**BASE, inp=inp())
    assert len(k) == 64
    # the same value spelled differently by Excel is the same validated input → same key
    assert k == cache_key(**BASE, inp=inp(code=600519, roe="30%", pe_ttm="20.0"))
    # dict order does not matter
    assert cache_key(**dict(BASE, params={"max_tokens": 512, "seed": 42, "temperature": 0.0}), inp=inp()) == k


@pytest.mark.parametrize(
    "change",
    [
        {"task": "ask"},
        {"task_version": "screen-2"},
        {"task_config": {"max_text_chars": 800}},
        {"model": "m@2"},
        {"params": {"temperature": 0.0, "seed": 43, "max_tokens": 512}},
        {"params": {"temperature": 0.7, "seed": 42, "max_tokens": 512}},
        {"inp": inp(report_text="营收1506亿元")},
        {"inp": inp(roe=30.01)},
        {"inp": inp(name="茅台")},
    ],
)
def test_key_changes_with_every_part(change):
    assert cache_key(**{**BASE, "inp": inp(), **change}) != cache_key(**BASE, inp=inp())


def test_cache_roundtrip_stats_and_clear(tmp_path):
    c = Cache(tmp_path / "c")
    assert c.get("k") is None
    c.set("k", {"a": 1})
    assert c.get("k") == {"a": 1}
    s = c.stats()
    assert (s["entries"], s["hits"], s["misses"], s["hit_rate"]) == (1, 1, 1, 0.5)
    assert c.clear() >= 1 and c.get("k") is None
    c.close()


def test_cache_is_shared_between_instances(tmp_path):
    a, b = Cache(tmp_path / "c"), Cache(tmp_path / "c")
    a.set("k", {"v": 1})
    assert b.get("k") == {"v": 1}
    a.close(), b.close()


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else False, reason="root can write anywhere")
def test_unwritable_dir_degrades_to_no_cache(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    c = Cache(ro / "c")
    assert not c.enabled and "cache disabled" in c.warning
    c.set("k", {"v": 1})
    assert c.get("k") is None


def test_unusable_dir_degrades_to_no_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = Cache(blocker / "c")  # a path under a regular file can never be created, even by root
    assert not c.enabled and "cache disabled" in c.warning
    c.set("k", {"v": 1})
    assert c.get("k") is None and c.stats()["entries"] == 0


def test_the_key_is_the_sha256_of_the_canonical_request_written_out():
    """The key's exact form, written out by hand: a change to it would silently re-ask the model for every
    cached row (and two versions of xladdin sharing a cache would never meet)."""
    import hashlib

    from xladdin.core.cache import cache_key

    key = cache_key(task="screen", task_version="screen-7", task_config={"max_text_chars": 900}, model="qwen@1",
                    params={"temperature": 0.0, "seed": 42, "max_tokens": 512},
                    inp={"name": "贵州茅台", "code": "600519.SH", "roe": 34.19, "report_text": None})
    written = ('{"config":{"max_text_chars":900},"input":{"code":"600519.SH","name":"贵州茅台","report_text":null,'
               '"roe":34.19},"model":"qwen@1","params":{"max_tokens":512,"seed":42,"temperature":0.0},'
               '"task":"screen","version":"screen-7"}')
    assert key == hashlib.sha256(written.encode("utf-8")).hexdigest()
    with pytest.raises(ValueError):  # NaN has no canonical JSON: a bad input never gets a key
        cache_key(task="t", task_version="v", task_config={}, model="m", params={}, inp={"x": float("nan")})


def test_a_validated_input_is_keyed_as_its_json():
    """An input model is keyed as the JSON it dumps (a date as its ISO text), the same as that dict."""
    import datetime as dt

    from pydantic import BaseModel

    from xladdin.core.cache import cache_key

    class Row(BaseModel):
        code: str
        day: dt.date

    common = dict(task="t", task_version="v", task_config={}, model="m", params={})
    assert cache_key(**common, inp=Row(code="600519", day=dt.date(2023, 12, 29))) == cache_key(
        **common, inp={"code": "600519", "day": "2023-12-29"})
