"""The add-ins' install files, made for one service URL: the Office add-in's XML manifest (custom
functions in a shared runtime, loaded from the cell service), WPS's ``manifest.xml`` (its functions'
namespace and metadata) and the ``jsplugins.xml`` entry that installs the WPS add-in online."""

from __future__ import annotations

from urllib.parse import quote
from xml.sax.saxutils import escape, quoteattr

from ..sheet.functions import NAMESPACE

ADDIN_ID = "5b0d6c1e-8f3a-4c57-9a21-7e4d2b6f0a93"  # the Office add-in's one id (a new id is a new add-in)
WPS_NAME = "xladdin"


def _version() -> str:
    from ..version import __version__

    parts = [p for p in __version__.split(".") if p.isdigit()][:4]
    return ".".join(parts + ["0"] * (4 - len(parts)))


def _keyed(url: str, key: str | None) -> str:
    """``url`` with ``key`` in its fragment, where the page's script (functions.js) reads it: a fragment is
    never sent to a server, nor kept in its logs as a query would be."""
    return url + (f"#key={quote(key, safe='')}" if key else "")


def office(base: str, key: str | None = None) -> str:
    """The Office add-in's manifest: every file from ``base`` (the cell service, https). With ``key``
    the task pane's URL carries it in its fragment; the URLs Office shows users (SupportUrl, Get
    Started's link) are the page without it."""
    base = base.rstrip("/")
    a = f"{base}/addin"
    u = {k: escape(v) for k, v in {"page": _keyed(f"{a}/taskpane.html", key), "support": f"{a}/taskpane.html",
                                   "js": f"{a}/functions.js", "json": f"{a}/functions.json",
                                   "i16": f"{a}/icon-16.png", "i32": f"{a}/icon-32.png", "i64": f"{a}/icon-64.png",
                                   "i80": f"{a}/icon-80.png", "base": base}.items()}
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<OfficeApp xmlns="http://schemas.microsoft.com/office/appforoffice/1.1"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xmlns:bt="http://schemas.microsoft.com/office/officeappbasictypes/1.0"
  xmlns:ov="http://schemas.microsoft.com/office/taskpaneappversionoverrides" xsi:type="TaskPaneApp">
  <Id>{ADDIN_ID}</Id>
  <Version>{_version()}</Version>
  <ProviderName>xladdin</ProviderName>
  <DefaultLocale>en-US</DefaultLocale>
  <DisplayName DefaultValue="xladdin"/>
  <Description DefaultValue="A local Qwen model as worksheet functions, answered on this machine."/>
  <IconUrl DefaultValue="{u['i32']}"/>
  <HighResolutionIconUrl DefaultValue="{u['i64']}"/>
  <SupportUrl DefaultValue="{u['support']}"/>
  <AppDomains>
    <AppDomain>{u['base']}</AppDomain>
  </AppDomains>
  <Hosts>
    <Host Name="Workbook"/>
  </Hosts>
  <Requirements>
    <Sets DefaultMinVersion="1.1">
      <Set Name="SharedRuntime" MinVersion="1.1"/>
    </Sets>
  </Requirements>
  <DefaultSettings>
    <SourceLocation DefaultValue="{u['page']}"/>
  </DefaultSettings>
  <Permissions>ReadWriteDocument</Permissions>
  <VersionOverrides xmlns="http://schemas.microsoft.com/office/taskpaneappversionoverrides"
    xsi:type="VersionOverridesV1_0">
    <Hosts>
      <Host xsi:type="Workbook">
        <Runtimes>
          <Runtime resid="Taskpane.Url" lifetime="long"/>
        </Runtimes>
        <AllFormFactors>
          <ExtensionPoint xsi:type="CustomFunctions">
            <Script>
              <SourceLocation resid="Functions.Script.Url"/>
            </Script>
            <Page>
              <SourceLocation resid="Taskpane.Url"/>
            </Page>
            <Metadata>
              <SourceLocation resid="Functions.Metadata.Url"/>
            </Metadata>
            <Namespace resid="Functions.Namespace"/>
          </ExtensionPoint>
        </AllFormFactors>
        <DesktopFormFactor>
          <GetStarted>
            <Title resid="GetStarted.Title"/>
            <Description resid="GetStarted.Description"/>
            <LearnMoreUrl resid="Support.Url"/>
          </GetStarted>
          <FunctionFile resid="Taskpane.Url"/>
          <ExtensionPoint xsi:type="PrimaryCommandSurface">
            <OfficeTab id="TabHome">
              <Group id="xladdin.Group">
                <Label resid="Group.Label"/>
                <Icon>
                  <bt:Image size="16" resid="Icon.16x16"/>
                  <bt:Image size="32" resid="Icon.32x32"/>
                  <bt:Image size="80" resid="Icon.80x80"/>
                </Icon>
                <Control xsi:type="Button" id="xladdin.Taskpane">
                  <Label resid="Taskpane.Label"/>
                  <Supertip>
                    <Title resid="Taskpane.Label"/>
                    <Description resid="Taskpane.Tooltip"/>
                  </Supertip>
                  <Icon>
                    <bt:Image size="16" resid="Icon.16x16"/>
                    <bt:Image size="32" resid="Icon.32x32"/>
                    <bt:Image size="80" resid="Icon.80x80"/>
                  </Icon>
                  <Action xsi:type="ShowTaskpane">
                    <TaskpaneId>xladdin.Pane</TaskpaneId>
                    <SourceLocation resid="Taskpane.Url"/>
                  </Action>
                </Control>
              </Group>
            </OfficeTab>
          </ExtensionPoint>
        </DesktopFormFactor>
      </Host>
    </Hosts>
    <Resources>
      <bt:Images>
        <bt:Image id="Icon.16x16" DefaultValue="{u['i16']}"/>
        <bt:Image id="Icon.32x32" DefaultValue="{u['i32']}"/>
        <bt:Image id="Icon.80x80" DefaultValue="{u['i80']}"/>
      </bt:Images>
      <bt:Urls>
        <bt:Url id="Functions.Script.Url" DefaultValue="{u['js']}"/>
        <bt:Url id="Functions.Metadata.Url" DefaultValue="{u['json']}"/>
        <bt:Url id="Taskpane.Url" DefaultValue="{u['page']}"/>
        <bt:Url id="Support.Url" DefaultValue="{u['support']}"/>
      </bt:Urls>
      <bt:ShortStrings>
        <bt:String id="Functions.Namespace" DefaultValue="{NAMESPACE}"/>
        <bt:String id="GetStarted.Title" DefaultValue="xladdin: type =XLADDIN.QWEN_SCREEN(A2:G2)"/>
        <bt:String id="Group.Label" DefaultValue="xladdin"/>
        <bt:String id="Taskpane.Label" DefaultValue="xladdin status"/>
      </bt:ShortStrings>
      <bt:LongStrings>
        <bt:String id="GetStarted.Description" DefaultValue="The QWEN functions, answered by xladdin cells serve."/>
        <bt:String id="Taskpane.Tooltip" DefaultValue="The cell service, its engine and its cache."/>
      </bt:LongStrings>
    </Resources>
  </VersionOverrides>
</OfficeApp>
"""


def wps_manifest() -> str:
    """WPS's ``manifest.xml``: where its functions' metadata is and their namespace."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<JsPlugin>
  <ApiVersion>1.0.0</ApiVersion>
  <Name>{WPS_NAME}</Name>
  <Description>A local Qwen model as worksheet functions, served by xladdin cells serve</Description>
  <Functions>
    <Uri>functions.json</Uri>
    <Namespace>{NAMESPACE}</Namespace>
  </Functions>
</JsPlugin>
"""


def wps_entry(base: str, key: str | None = None) -> str:
    """The ``jsplugins.xml`` entry that installs the WPS add-in online, from the cell service: WPS opens
    its folder's page; with ``key`` the URL carries it in its fragment, as the Office task pane's does."""
    url = quoteattr(_keyed(f"{base.rstrip('/')}/addin/wps/", key))
    return f'<jspluginonline name="{WPS_NAME}" type="et" url={url} enable="enable" install="null"/>'


def wps_plugins(base: str, existing: str | None = None, key: str | None = None) -> str:
    """``jsplugins.xml`` with this add-in's entry (replacing an earlier one of it, keeping the others)."""
    import re

    entry = wps_entry(base, key)
    if existing and "<jsplugins" in existing:
        kept = re.sub(r'\s*<jspluginonline[^>]*name="' + WPS_NAME + r'"[^>]*/>', "", existing)
        return re.sub(r"(<jsplugins[^>]*>)", lambda m: m.group(1) + "\n  " + entry, kept, count=1)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<jsplugins>\n  {entry}\n</jsplugins>\n'
