"""Build the LibreOffice extension (``.oxt``): the function table (``xladdin.sheet.functions``, shared by every
grid) is its one source — the UNO interface (IDL, compiled to the type library ``XQwenCalc.rdb`` shipped
beside this module), the function names and help Calc shows (``CalcAddIns.xcu``) and the component's
methods."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from ..errors import ConfigError
from ..sheet.functions import FUNCTIONS, Param

HERE = Path(__file__).parent
TYPES = HERE / "XQwenCalc.rdb"
MODULE = "org.xladdin.calc"
INTERFACE = "XQwenCalc"
IMPLEMENTATION = "org.xladdin.calc.QwenCalc"
EXTENSION_ID = "org.xladdin.calc"
RANGE = "sequence< sequence< any > >"


def idl_type(p: Param) -> str:
    """A parameter's type in the interface: a range that must be given, else an ``any`` (which may be left out)."""
    return RANGE if p.shape == "range" and not p.optional else "any"


def uno_name(name: str) -> str:
    """A parameter's name in the interface (UNO identifiers have no underscores): max_chars → maxChars."""
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def idl() -> str:
    """The UNO interface of the add-in, one method per function (every result an ``any``: a value, an
    array, or a volatile result while answers are awaited)."""
    lines = ["#include <com/sun/star/uno/XInterface.idl>", ""]
    opening = " ".join(f"module {m} {{" for m in MODULE.split("."))
    lines.append(opening)
    lines.append(f"    interface {INTERFACE} : com::sun::star::uno::XInterface {{")
    for f in FUNCTIONS:
        params = ", ".join(f"[in] {idl_type(p)} {uno_name(p.name)}" for p in f.params)
        lines.append(f"        any {f.method}({params});")
    lines.append("    };")
    lines.append(" ".join("};" for _ in MODULE.split(".")))
    return "\n".join(lines) + "\n"


def _text(tag: str, value: str) -> str:
    return f'<prop oor:name="{tag}"><value xml:lang="en">{escape(value)}</value></prop>'


def xcu() -> str:
    """Calc's names, categories and help for the functions (``org.openoffice.Office.CalcAddIns``)."""
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<oor:component-data xmlns:oor="http://openoffice.org/2001/registry" '
           'xmlns:xs="http://www.w3.org/2001/XMLSchema" oor:name="CalcAddIns" oor:package="org.openoffice.Office">',
           '<node oor:name="AddInInfo">', f'<node oor:name="{IMPLEMENTATION}" oor:op="replace">',
           '<node oor:name="AddInFunctions">']
    for f in FUNCTIONS:
        out += [f'<node oor:name="{f.method}" oor:op="replace">', _text("DisplayName", f.name),
                _text("Description", f.help), '<prop oor:name="Category"><value>Add-In</value></prop>',
                '<prop oor:name="CompatibilityName"><value xml:lang="en-US">' + f.name + "</value></prop>",
                '<node oor:name="Parameters">']
        for p in f.params:
            out += [f'<node oor:name="{uno_name(p.name)}" oor:op="replace">', _text("DisplayName", p.name),
                    _text("Description", p.help), "</node>"]
        out += ["</node>", "</node>"]
    out += ["</node>", "</node>", "</node>", "</oor:component-data>"]
    return "\n".join(out) + "\n"


MANIFEST = """<?xml version="1.0" encoding="UTF-8"?>
<manifest:manifest xmlns:manifest="http://openoffice.org/2001/manifest">
  <manifest:file-entry manifest:media-type="application/vnd.sun.star.uno-typelibrary;type=RDB"
    manifest:full-path="XQwenCalc.rdb"/>
  <manifest:file-entry manifest:media-type="application/vnd.sun.star.configuration-data"
    manifest:full-path="CalcAddIns.xcu"/>
  <manifest:file-entry manifest:media-type="application/vnd.sun.star.uno-component;type=Python"
    manifest:full-path="xladdin_calc.py"/>
</manifest:manifest>
"""


def description(version: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<description xmlns="http://openoffice.org/extensions/description/2006"
  xmlns:xlink="http://www.w3.org/1999/xlink">
  <identifier value="{EXTENSION_ID}"/>
  <version value="{version}"/>
  <display-name><name lang="en">xladdin: a local Qwen model as Calc functions</name></display-name>
  <dependencies>
    <OpenOffice.org-minimal-version xmlns:d="http://openoffice.org/extensions/description/2006"
      d:name="LibreOffice 7.0" value="3.4"/>
  </dependencies>
</description>
"""


def environment() -> str:
    """``pythonpath/xladdin_calc_env.py``: where this environment's packages are, and its Python, so
    the component imports this xladdin inside LibreOffice (whose Python must be the same version)."""
    paths = [str(Path(__file__).resolve().parents[2])]
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths()[key]
        if p not in paths:
            paths.append(p)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"PATHS = {paths!r}\nPYTHON = {version!r}\nEXECUTABLE = {sys.executable!r}\n"


def compile_types(out: Path) -> Path:
    """The type library from ``idl()`` with LibreOffice's SDK (``unoidl-write``); only needed when the
    function table changes (the library ships with the package)."""
    tool = shutil.which("unoidl-write") or next(
        (str(p) for p in Path("/usr/lib/libreoffice/sdk/bin").glob("unoidl-write") if p.exists()), None)
    program = Path("/usr/lib/libreoffice/program")
    if not tool:
        raise ConfigError("unoidl-write not found: install LibreOffice's SDK (Debian: libreoffice-dev)")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"{INTERFACE}.idl"
        source.write_text(idl())
        subprocess.run([tool, str(program / "types.rdb"), str(program / "types" / "offapi.rdb"), str(source),
                        str(out)], check=True, capture_output=True)
    return out


def build(out: Path) -> Path:
    """Write the extension to ``out`` (``.oxt``)."""
    from ..version import __version__

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("META-INF/manifest.xml", MANIFEST)
        z.writestr("description.xml", description(__version__))
        z.writestr("CalcAddIns.xcu", xcu())
        z.write(TYPES, "XQwenCalc.rdb")
        z.write(HERE / "component.py", "xladdin_calc.py")
        z.writestr("pythonpath/xladdin_calc_env.py", environment())
    return out


@dataclass(frozen=True)
class CalcPython:
    """The Python with LibreOffice's ``uno`` module: its path, version (``3.11``, ``3.11.2``) and
    installation (``sys.base_prefix``)."""

    path: str
    version: str
    full_version: str
    prefix: str
    system: bool  # the system's Python (Debian's LibreOffice), not one LibreOffice ships


@dataclass(frozen=True)
class Finding:
    text: str
    fatal: bool  # the add-in will not load (or not install) this way


@functools.cache
def _calc_python() -> CalcPython | None:
    """LibreOffice's own Python on Windows and macOS, the system's on Linux; ``None`` without
    LibreOffice. Asked once per process."""
    soffice = shutil.which("soffice") or shutil.which("soffice.exe")
    candidates = []
    if soffice:
        program = Path(soffice).resolve().parent
        candidates += [(program / "python", False), (program / "python.exe", False)]
    candidates += [(Path("/usr/bin/python3"), True),
                   (Path("/Applications/LibreOffice.app/Contents/Resources/python"), False)]
    probe = "import uno, sys; v = sys.version_info; print('%d.%d' % v[:2], '%d.%d.%d' % v[:3], sys.base_prefix)"
    for c, system in candidates:
        if c.is_file():
            r = subprocess.run([str(c), "-c", probe], capture_output=True, text=True)
            if r.returncode == 0:
                version, full, prefix = r.stdout.strip().split(" ", 2)
                return CalcPython(str(c), version, full, prefix, system)
    return None


def calc_python() -> str | None:
    """The Python with LibreOffice's ``uno`` module, or ``None`` without LibreOffice."""
    found = _calc_python()
    return found.path if found else None


NO_LIBREOFFICE = "no LibreOffice with Python (uno) found: install LibreOffice (Debian: libreoffice-calc python3-uno)"


def recipe(python: str) -> str:
    """How to make an environment the add-in works from: one made from LibreOffice's Python, which
    sees LibreOffice's ``uno`` (``--system-site-packages``)."""
    root = Path(__file__).resolve().parents[2]
    source = f"-e {root}" if (root / "pyproject.toml").is_file() else "xladdin"  # a checkout, or the package
    return (f"{python} -m venv --system-site-packages ENV && ENV/bin/pip install {source} && "
            "ENV/bin/xladdin calc install")


def _starts(lo: CalcPython, env: dict[str, str]) -> bool:
    """Whether LibreOffice's Python, started as LibreOffice starts it with ``env``, finds its own
    library and ``uno``: an interpreter embedded in LibreOffice takes its library from the first
    ``python3`` on PATH (a venv's ``pyvenv.cfg`` names its home), as one started by the bare name does."""
    try:
        r = subprocess.run(["python3", "-c", "import uno"], executable=lo.path, env=env, capture_output=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def path_problem(env: dict[str, str] | None = None) -> str | None:
    """Why a LibreOffice started with ``env`` (this process's environment) loads no Python add-in, or
    ``None``."""
    lo = _calc_python()
    env = dict(os.environ if env is None else env)
    if lo is None or not lo.system or os.name != "posix" or _starts(lo, env):
        return None
    first = shutil.which("python3", path=env.get("PATH", ""))
    where = f"{first} (a Python of another installation, without LibreOffice's uno)" if first else "not found"
    folder = str(Path(first).parent) if first else "it"
    return (f"a LibreOffice started with this PATH loads no Python add-in (every cell #NULL!, Err:521; unopkg "
            f"fails with std::bad_alloc): LibreOffice's Python ({lo.path}, {lo.full_version}) takes its library "
            f"from the first python3 on PATH, {where}. Start LibreOffice from a shell without {folder} on PATH "
            f"(deactivate the environment), or work from an environment made from LibreOffice's Python, which "
            f"works with it on PATH: {recipe(lo.path)}")


def launch_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's environment) for starting LibreOffice or unopkg: without the folders on
    PATH whose ``python3`` would keep LibreOffice's Python from starting (``path_problem``)."""
    env = dict(os.environ if env is None else env)
    lo = _calc_python()
    if lo is None or not lo.system or os.name != "posix":
        return env
    for _ in range(8):
        if _starts(lo, env):
            break
        first = shutil.which("python3", path=env.get("PATH", ""))
        if first is None:
            break
        folder = os.path.normcase(str(Path(first).parent))
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                      if os.path.normcase(p.rstrip("/") or "/") != folder)
    return env


def findings(env: dict[str, str] | None = None) -> list[Finding]:
    """What stands between this environment and an add-in that loads in this machine's LibreOffice,
    each naming its fix."""
    lo = _calc_python()
    if lo is None:
        return [Finding(NO_LIBREOFFICE, True)]
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    if lo.version != ours:
        return [Finding(f"LibreOffice's Python is {lo.version} ({lo.path}) and this environment's is {ours}: the "
                        f"extension loads xladdin from this environment, so build it from a Python {lo.version} "
                        f"environment made from LibreOffice's own: {recipe(lo.path)}", True)]
    out = []
    if os.path.realpath(sys.base_prefix) != os.path.realpath(lo.prefix):
        full = ".".join(map(str, sys.version_info[:3]))
        out.append(Finding(
            f"this environment ({sys.prefix}) is made from another Python installation ({sys.base_prefix}, "
            f"{full}) than LibreOffice's ({lo.path}, {lo.full_version}): the add-in loads this environment's "
            f"packages into LibreOffice's Python, which works only while LibreOffice is started without this "
            f"environment on PATH (not from a shell where it is activated). An environment made from "
            f"LibreOffice's Python works either way: {recipe(lo.path)}", False))
    problem = path_problem(env)
    if problem:
        out.append(Finding(problem, True))
    return out


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def install(oxt: Path, profile: Path | None = None, shared: bool = False) -> str:
    """Add the extension to LibreOffice: into the user profile ``profile`` (``-env:UserInstallation``;
    LibreOffice's default profile when ``None``), or for all users with ``shared``. As root, which
    unopkg allows only ``--shared``, a profile's install goes through LibreOffice's extension manager
    in a headless LibreOffice on that profile. Returns what was done."""
    from .headless import install as unopkg_add

    env = launch_env()
    if shared or not _root():
        unopkg = shutil.which("unopkg")
        if unopkg is None:
            raise ConfigError("unopkg not found: install LibreOffice (its program folder has unopkg)")
        try:
            return " ".join(unopkg_add(oxt, profile, unopkg=unopkg, shared=shared, env=env))
        except RuntimeError as e:
            raise ConfigError(str(e)) from None
    where = ["--user-installation", str(profile)] if profile else []
    added = headless(["--add", str(oxt), *where], env)
    return (f"LibreOffice's extension manager: {added['added']} added to the profile {added['profile']} (as root, "
            "unopkg installs only for all users: --shared)")


def shapes() -> dict[str, list[int]]:
    """Each function's result as (rows, columns): the array formula a cell of it needs in Calc."""
    return {f.name: [f.rows, f.width] for f in FUNCTIONS}


def headless(args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> dict:
    """Run ``headless.py`` under LibreOffice's Python (its LibreOffice started with ``launch_env``); its
    JSON result."""
    python = calc_python()
    if python is None:
        raise ConfigError(NO_LIBREOFFICE)
    r = subprocess.run([python, str(HERE / "headless.py"), *args], capture_output=True, text=True,
                       env=launch_env(env), timeout=timeout)
    if r.returncode:
        raise ConfigError(f"LibreOffice headless failed: {(r.stderr or r.stdout).strip()[-2000:]}")
    return json.loads(r.stdout)


def template(source: Path, out: Path) -> list[list[str]]:
    """``source`` (the Excel template) as a Calc workbook ``out`` whose formulas call the add-in — each
    ``QWEN_SCREEN`` an array formula as wide as its result. Runs a LibreOffice of its own, with the
    extension in a profile of its own; no model is asked. Returns the formulas' ranges."""
    with tempfile.TemporaryDirectory(prefix="xladdin-calc-") as tmp:
        oxt = build(Path(tmp) / "xladdin.oxt")
        result = headless(["--profile", str(Path(tmp) / "profile"), "--install", str(oxt), "--convert",
                           str(source), "--shapes", json.dumps(shapes()), "--save", str(out)])
    return result["ranges"]
