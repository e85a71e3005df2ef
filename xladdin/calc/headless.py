"""Drive a headless LibreOffice Calc with the extension installed: fill a sheet, enter the formulas,
recalculate, wait until no cell waits, read every cell, save; or reopen a saved sheet and do the same.

Runs as a script under the Python that has LibreOffice's ``uno`` module (``calc_python()``), not
inside xladdin's environment, and prints one JSON object. Used by the tests and ``bench calc``:

    python3 headless.py --profile DIR [--install X.oxt] (--fill JOB.json | --open BOOK.ods) [--save BOOK.ods]
    python3 headless.py --add X.oxt [--user-installation DIR]     (root's install into a user profile)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

PENDING = "#QWEN… 计算中 pending"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _places(profile: Path) -> list[str]:
    """A profile of its own, and a place of its own for extensions shared by all users (``unopkg
    --shared``, which is what root may run), so nothing outside ``profile`` is touched."""
    profile = profile.resolve()
    return [f"-env:UserInstallation={(profile / 'user').as_uri()}",
            f"-env:UNO_SHARED_PACKAGES_CACHE={(profile / 'shared').as_uri()}"]


def _root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def install(oxt: Path, profile: Path | None = None, unopkg: str = "unopkg", *, shared: bool = False,
            places: list[str] | None = None, env: dict[str, str] | None = None) -> list[str]:
    """``unopkg add`` the extension (replacing an earlier build): into the user profile ``profile``
    (``-env:UserInstallation``; LibreOffice's default one when ``None``), or for all users with
    ``shared`` (unopkg allows root nothing else); ``places`` instead of the profile's option where
    given. Returns what was run; a failure is a ``RuntimeError`` with unopkg's words."""
    where = places if places is not None else [f"-env:UserInstallation={profile.resolve().as_uri()}"] if profile else []
    cmd = [unopkg, "add", "--force", *(["--shared"] if shared else []), *where, str(oxt)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(f"unopkg could not add {oxt}: {(r.stderr or r.stdout).strip()}")
    return cmd


def _sandboxed(oxt: Path, profile: Path) -> list[str]:
    """The extension into this driver's profile of its own: for its user, or as root (whom unopkg
    allows only ``--shared``) into the profile's own place for all users' extensions."""
    return install(oxt, shared=_root(), places=_places(profile))


def _approving():
    """A command environment that approves what adding an extension asks (as unopkg does)."""
    import uno
    import unohelper
    from com.sun.star.task import XInteractionHandler
    from com.sun.star.ucb import XCommandEnvironment, XProgressHandler

    approve = uno.getTypeByName("com.sun.star.task.XInteractionApprove")

    class Approve(unohelper.Base, XInteractionHandler):
        def handle(self, request):
            for choice in request.Continuations:
                if choice.queryInterface(approve):
                    choice.select()
                    return

    class Quiet(unohelper.Base, XProgressHandler):
        def push(self, status):
            pass

        def update(self, status):
            pass

        def pop(self):
            pass

    class Environment(unohelper.Base, XCommandEnvironment):
        def getInteractionHandler(self):  # noqa: N802  (UNO's names)
            return Approve()

        def getProgressHandler(self):  # noqa: N802
            return Quiet()

    return Environment()


def add_to_profile(oxt: Path, profile: Path | None) -> dict:
    """The extension added to the user profile ``profile`` (LibreOffice's default one when ``None``)
    by LibreOffice's extension manager in a headless LibreOffice on that profile: what root does
    instead of ``unopkg add``, which allows root only ``--shared``."""
    port = _free_port()
    options = [f"-env:UserInstallation={profile.resolve().as_uri()}"] if profile else []
    if profile:
        profile.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["soffice", "--headless", "--invisible", "--norestore", "--nologo", "--nodefault",
                             *options, f"--accept=socket,host=127.0.0.1,port={port};urp;StarOffice.ComponentContext"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        ctx = _connect(port, proc)
        import uno

        manager = ctx.getValueByName("/singletons/com.sun.star.deployment.ExtensionManager")
        try:
            added = manager.addExtension(oxt.resolve().as_uri(), (), "user", None, _approving())
        except Exception as e:
            raise SystemExit(json.dumps({"error": f"LibreOffice could not add {oxt}: {e}"})) from None
        identifier = added.getIdentifier().Value if added else None
        path = ctx.ServiceManager.createInstanceWithContext("com.sun.star.util.PathSubstitution", ctx)
        user = uno.fileUrlToSystemPath(path.substituteVariables("$(user)", True))
        try:
            ctx.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", ctx).terminate()
        except Exception:
            pass  # the bridge goes away with LibreOffice
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    return {"added": identifier, "profile": user}


def _start(profile: Path, port: int) -> subprocess.Popen:
    profile.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(["soffice", "--headless", "--invisible", "--norestore", "--nologo", "--nodefault",
                             *_places(profile),
                             f"--accept=socket,host=127.0.0.1,port={port};urp;StarOffice.ComponentContext"],
                            stdout=subprocess.DEVNULL, stderr=(profile / "soffice.log").open("ab"),
                            start_new_session=True)


def _connect(port: int, proc: subprocess.Popen, wait: float = 90.0):
    import uno

    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext("com.sun.star.bridge.UnoUrlResolver", local)
    deadline = time.monotonic() + wait
    while True:
        try:
            return resolver.resolve(f"uno:socket,host=127.0.0.1,port={port};urp;StarOffice.ComponentContext")
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(json.dumps({"error": "LibreOffice did not start"})) from None
            time.sleep(0.3)


def _props(**values):
    from com.sun.star.beans import PropertyValue

    return tuple(PropertyValue(Name=k, Value=v) for k, v in values.items())


def column(n: int) -> str:
    """The letters of column ``n`` (from 0): A … Z, AA …"""
    name = ""
    while n >= 0:
        name = chr(ord("A") + n % 26) + name
        n = n // 26 - 1
    return name


def _box(address: str) -> list[int]:
    """``I2:AB301`` (or one cell) as [first column, first row, last column, last row], from 0: read here,
    no call to LibreOffice."""
    corners = []
    for part in address.split(":"):
        letters = part.rstrip("0123456789").lstrip("$").replace("$", "")
        col = 0
        for ch in letters.upper():
            col = col * 26 + ord(ch) - ord("A") + 1
        corners.append((col - 1, int(part[len(part.rstrip("0123456789")):]) - 1))
    (c0, r0), (c1, r1) = corners[0], corners[-1]
    return [c0, r0, c1, r1]


def _fill_down(sheet, first: str, formula: str, rows: int) -> list[str]:
    """``formula`` entered as an array formula over ``first`` (one row) and filled down to ``rows`` rows as
    a user fills it (Calc's copy of a block: each row's references moved with it), the block doubled at
    each copy; the rows' addresses."""
    import uno

    c0, r0, c1, _ = _box(first)
    sheet.getCellRangeByPosition(c0, r0, c1, r0).setArrayFormula(formula)
    done = 1
    while done < rows:
        n = min(done, rows - done)
        source = sheet.getCellRangeByPosition(c0, r0, c1, r0 + n - 1).getRangeAddress()
        target = uno.createUnoStruct("com.sun.star.table.CellAddress")
        target.Sheet, target.Column, target.Row = source.Sheet, c0, r0 + done
        sheet.copyRange(target, source)
        done += n
    return [f"{column(c0)}{r0 + 1 + k}:{column(c1)}{r0 + 1 + k}" for k in range(rows)]


def _range(doc, where: list[str]):
    sheet, address = where
    return doc.Sheets.getByName(sheet).getCellRangeByName(address)


def _look(doc, ranges: list[list[str]]) -> list[list]:
    """Every range's values, read in one call per sheet (the box around that sheet's ranges) and cut
    here: a call to LibreOffice is a round trip over its socket, one a range would cost more than the
    cells take to fill."""
    boxes: dict[str, list[int]] = {}
    for sheet, address in ranges:
        a = _box(address)
        box = boxes.setdefault(sheet, list(a))
        box[:] = [min(box[0], a[0]), min(box[1], a[1]), max(box[2], a[2]), max(box[3], a[3])]
    blocks = {sheet: doc.Sheets.getByName(sheet).getCellRangeByPosition(*box).getDataArray()
              for sheet, box in boxes.items()}
    values = []
    for sheet, address in ranges:
        c0, r0, c1, r1 = _box(address)
        bc, br = boxes[sheet][:2]
        values.append([list(row[c0 - bc: c1 - bc + 1]) for row in blocks[sheet][r0 - br: r1 - br + 1]])
    return values


def _wait(doc, ranges: list[list[str]], bound: float) -> tuple[list[list], float, bool]:
    """Every range's values once no cell waits (or at the bound), the moment (``time.monotonic()``) of
    the look that found none waiting, and whether every cell got its value. The values are that look's:
    the time does not include reading them."""
    start = time.monotonic()
    while True:
        values = _look(doc, ranges)
        seen = time.monotonic()
        waiting = any(PENDING in str(v) for block in values for row in block for v in row)
        if not waiting or seen - start > bound:
            return values, seen, not waiting
        time.sleep(0.05)


def _convert(doc, shapes: dict[str, list[int]]) -> list[list[str]]:
    """Every formula that calls one of ``shapes``' functions (read from another format as an unknown
    name) entered again so that it calls the add-in, as an array formula of the function's shape
    (rows, columns) where that is more than one cell. Returns the ranges of the formulas."""
    import re

    pattern = re.compile(r"\b(" + "|".join(sorted(shapes, key=len, reverse=True)) + r")\(", re.IGNORECASE)
    ranges = []
    for i in range(doc.Sheets.Count):
        sheet = doc.Sheets.getByIndex(i)
        found = sheet.queryContentCells(16)  # com.sun.star.sheet.CellFlags.FORMULA
        for block in found.getRangeAddresses():
            for row in range(block.StartRow, block.EndRow + 1):
                for col in range(block.StartColumn, block.EndColumn + 1):
                    cell = sheet.getCellByPosition(col, row)
                    formula = cell.getFormula()
                    called = [m.group(1).upper() for m in pattern.finditer(formula)]
                    if not called:
                        continue
                    formula = pattern.sub(lambda m: m.group(1).upper() + "(", formula)
                    height, width = shapes[called[0]] if formula.upper().startswith("=" + called[0] + "(") else (1, 1)
                    target = sheet.getCellRangeByPosition(col, row, col + width - 1, row + height - 1)
                    if height * width > 1:
                        target.setArrayFormula(formula)
                    else:
                        cell.setFormula(formula)
                    ranges.append([sheet.Name, f"{column(col)}{row + 1}:{column(col + width - 1)}{row + height}"])
    return ranges


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--profile", type=Path, help="a profile of this driver's own (required but with --add)")
    p.add_argument("--install", type=Path, help="an .oxt to install into the profile first")
    p.add_argument("--add", type=Path, help="only add this .oxt to the user profile --user-installation (a "
                   "LibreOffice user installation folder; the default one if not given) and stop")
    p.add_argument("--user-installation", type=Path)
    p.add_argument("--fill", type=Path, help="JSON: {rows: [[…]], formulas: [[range, formula]], fill_down: "
                   "[[first row's range, formula, rows]]}")
    p.add_argument("--open", type=Path, help="a saved sheet to reopen")
    p.add_argument("--convert", type=Path, help="a workbook of another format (.xlsx) whose formulas to enter "
                   "again for the add-in (with --shapes and --save)")
    p.add_argument("--shapes", type=json.loads, default={}, help='JSON: {"FUNCTION": [rows, columns]}')
    p.add_argument("--save", type=Path)
    p.add_argument("--bound", type=float, default=120.0)
    p.add_argument("--warm", action="store_true", help="load the add-in before timing: the --fill job's warm "
                   "formulas ([[range, formula]]; a QWEN_STATUS cell if it has none), entered, computed, cleared")
    args = p.parse_args()
    if args.add:
        print(json.dumps(add_to_profile(args.add, args.user_installation), ensure_ascii=False))
        return
    if args.profile is None:
        p.error("--profile is required")
    if args.install:
        try:
            _sandboxed(args.install, args.profile)
        except RuntimeError as e:
            raise SystemExit(json.dumps({"error": str(e)})) from None
    port = _free_port()
    proc = _start(args.profile, port)
    out: dict = {}
    try:
        ctx = _connect(port, proc)
        desktop = ctx.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", ctx)
        if args.fill:
            job = json.loads(args.fill.read_text(encoding="utf-8"))
            doc = desktop.loadComponentFromURL("private:factory/scalc", "_blank", 0, _props(Hidden=True))
            sheet = doc.Sheets.getByIndex(0)
            width = max(len(r) for r in job["rows"])
            block = [[("" if v is None else v) for v in r] + [""] * (width - len(r)) for r in job["rows"]]
            sheet.getCellRangeByName(f"A1:{column(width - 1)}{len(block)}").setDataArray(block)
            if args.warm:  # the add-in loaded and its runtime made before the clock starts
                t0 = time.monotonic()
                warm = job.get("warm") or [["ZZ1:ZZ1", "=QWEN_STATUS()"]]
                for address, formula in warm:
                    sheet.getCellRangeByName(address).setArrayFormula(formula)
                _wait(doc, [[sheet.Name, address] for address, _ in warm], args.bound)
                for address, _ in warm:
                    sheet.getCellRangeByName(address).clearContents(1023)
                out["warm_up_s"] = round(time.monotonic() - t0, 3)
            started = time.monotonic()
            filled_down = [a for first, formula, n in job.get("fill_down", [])
                           for a in _fill_down(sheet, first, formula, n)]
            for address, formula in job["formulas"]:
                sheet.getCellRangeByName(address).setArrayFormula(formula)
            out["entered_s"] = round(time.monotonic() - started, 3)
            ranges = [[sheet.Name, a] for a in filled_down] + [[sheet.Name, a] for a, _ in job["formulas"]]
        elif args.convert:
            doc = desktop.loadComponentFromURL(args.convert.resolve().as_uri(), "_blank", 0, _props(Hidden=True))
            doc.enableAutomaticCalculation(False)  # entered, not computed: no model is asked here
            ranges = out["ranges"] = _convert(doc, args.shapes)
            doc.enableAutomaticCalculation(True)
        else:
            doc = desktop.loadComponentFromURL(args.open.resolve().as_uri(), "_blank", 0, _props(Hidden=True))
            ranges = json.loads((args.open.with_suffix(".ranges.json")).read_text())
            started = time.monotonic()
            doc.calculateAll()
        if not args.convert:
            waiting_from = time.monotonic()
            values, seen, filled = _wait(doc, ranges, args.bound)
            out.update(values=values, seconds=round(seen - started, 3), filled=filled,
                       waited_s=round(seen - waiting_from, 3),
                       formulas=[_range(doc, a).getArrayFormula() for a in ranges])
            doc.calculate()  # a normal recalculation (F9): only what Calc holds out of date
            out["calculated"] = _look(doc, ranges)
            doc.calculateAll()  # a hard one: every cell once more, now answered from memory
            out["recalculated"] = _look(doc, ranges)
        if args.save:
            doc.storeToURL(args.save.resolve().as_uri(), _props(FilterName="calc8"))
            args.save.with_suffix(".ranges.json").write_text(json.dumps(ranges))
        doc.close(True)
        try:
            desktop.terminate()
        except Exception:
            pass  # the bridge goes away with LibreOffice
    finally:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # soffice.bin and the engine's server with it
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    sys.exit(main())
