"""``xladdin cells``: the local cell service for Excel on Mac and the web and WPS Spreadsheets
(``serve``), the Office add-in's manifest (``office``), WPS's install entry (``wps``)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from ..errors import ConfigError

DEFAULT_PORT = 8443


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cells", help="the cell service for Excel on Mac / the web and WPS (an Office add-in)")
    cells = p.add_subparsers(dest="cells_command", required=True)

    serve = cells.add_parser("serve", help="serve the worksheet functions and the add-in over HTTPS")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; beyond this "
                       "machine the key XLADDIN_CELLS_KEY is required)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    serve.add_argument("--origin", action="append", default=[], help="another origin whose pages may call "
                       "(the add-in's own, https://localhost:PORT, always may)")
    serve.add_argument("--cert-dir", type=Path, help="where the certificate is kept (default: beside the config)")
    serve.add_argument("--rate", type=float, default=50.0,
                       help="requests a second for the key, or per client address without one (default 50)")
    serve.set_defaults(func=run_serve)

    office = cells.add_parser("office", help="write the Office add-in's manifest and say how to sideload it")
    office.add_argument("-o", "--out", type=Path, default=Path("xladdin-manifest.xml"))
    office.add_argument("--url", help=f"the cell service's URL (default https://localhost:{DEFAULT_PORT})")
    office.set_defaults(func=run_office)

    wps = cells.add_parser("wps", help="write WPS Spreadsheets' install entry (jsplugins.xml) for the add-in")
    wps.add_argument("--jsplugins", type=Path, help="the jsplugins.xml to write (default: WPS's jsaddons folder)")
    wps.add_argument("--url", help=f"the cell service's URL (default https://localhost:{DEFAULT_PORT})")
    wps.set_defaults(func=run_wps)


def _key() -> str | None:
    return os.environ.get("XLADDIN_CELLS_KEY") or None


def run_serve(args: argparse.Namespace) -> int:
    try:
        from ..cells import certs, service
    except ImportError as e:
        raise ConfigError(f"the cell service needs its extra ({e.name} is missing): pip install 'xladdin[cells]'") \
            from None
    folder = args.cert_dir or certs.default_folder()
    hosts = () if service.loopback(args.host) or args.host in ("0.0.0.0", "::") else (args.host,)
    cert = certs.ensure(folder, hosts)
    service.more_open_files()
    svc = service.CellService(host=args.host, port=args.port, key=_key(), origins=tuple(args.origin), rate=args.rate)
    running = service.Running(svc, service.tls(cert.cert, cert.key))
    print(f"cell service on {running.url} (the add-in: {running.url}/addin/taskpane.html)")
    print(f"certificate: {cert.cert}; trust its authority {cert.ca} once:\n{certs.trust_text(cert.ca)}")
    print("stop with Ctrl-C", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    running.stop()
    svc.runtime.close(abort=True)
    return 0


def _base(url: str | None) -> str:
    base = (url or f"https://localhost:{DEFAULT_PORT}").rstrip("/")
    if not base.startswith("https://"):
        raise ConfigError(f"{base}: Office loads add-ins over https only")
    return base


def run_office(args: argparse.Namespace) -> int:
    from ..cells import certs, manifests

    base = _base(args.url)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(manifests.office(base, _key()), encoding="utf-8")
    ca = certs.default_folder() / "ca.pem"
    print(f"wrote {args.out} (the add-in's files from {base}/addin/)")
    print(f"""
1. Start the service: xladdin cells serve   (it makes its certificate in {ca.parent})
2. Trust its authority {ca} once (Office loads add-ins only from a trusted https URL):
{certs.trust_text(ca)}
3. Sideload the manifest:
  Excel for Mac: copy {args.out.name} to ~/Library/Containers/com.microsoft.Excel/Data/Documents/wef/
    (make the folder if needed), restart Excel, then Insert > Add-ins > My Add-ins > xladdin.
  Excel on the web: Insert > Add-ins (Office Add-ins) > Upload My Add-in > {args.out.name}. The browser must
    reach {base} (the service on the same machine as the browser) and trust its certificate.
  Excel for Windows: a shared folder catalog (Trust Center > Trusted Add-in Catalogs) holding the manifest.
4. In a cell: =XLADDIN.QWEN_SCREEN(A2:G2), =XLADDIN.QWEN("..."), =XLADDIN.QWEN_STATUS()""")
    return 0


def jsaddons_folder() -> Path:
    """WPS's per-user add-in folder (where its jsplugins.xml lives)."""
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / "kingsoft" / "wps" / "jsaddons"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Containers" / "com.kingsoft.wpsoffice.mac" / "Data" / ".kingsoft" / "wps" \
            / "jsaddons"
    return Path.home() / ".local" / "share" / "Kingsoft" / "wps" / "jsaddons"


def run_wps(args: argparse.Namespace) -> int:
    from ..cells import manifests

    base = _base(args.url)
    path = args.jsplugins or jsaddons_folder() / "jsplugins.xml"
    existing = path.read_text(encoding="utf-8") if path.is_file() else None
    path.parent.mkdir(parents=True, exist_ok=True)
    key = _key()
    path.write_text(manifests.wps_plugins(base, existing, key), encoding="utf-8")
    print(f"wrote {path}: WPS Spreadsheets loads the xladdin add-in from {base}/addin/wps/ when it starts"
          + (" (the key XLADDIN_CELLS_KEY in its URL's fragment)" if key else ""))
    print("Start the service (xladdin cells serve), trust its certificate (see xladdin cells office), restart WPS;")
    print("then in a cell: =XLADDIN.QWEN_SCREEN(A2:G2). WPS's custom functions are synchronous: a cell shows")
    print("the pending placeholder until its answer arrives and the sheet is recalculated.")
    return 0
