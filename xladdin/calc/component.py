"""The UNO component of the xladdin Calc add-in: it runs inside LibreOffice's Python (shipped in the
extension as ``xladdin_calc.py``). Thin: it finds xladdin in the environment the extension was built
from and hands every call to ``xladdin.calc.runtime``; errors are cell values, never dialogs."""

import sys

import uno
import unohelper
from com.sun.star.awt import XCallback
from com.sun.star.frame import XTerminateListener
from com.sun.star.lang import XServiceInfo, XServiceName
from com.sun.star.sheet import XVolatileResult

IMPLEMENTATION = "org.xladdin.calc.QwenCalc"
SERVICE = "com.sun.star.sheet.AddIn"
_functions = None  # one per LibreOffice process
_problem = None


def _load(ctx):
    """``xladdin.calc.runtime.CalcFunctions`` for this process, or the reason it cannot be loaded."""
    global _functions, _problem
    if _functions is not None or _problem is not None:
        return _functions
    try:
        from xladdin_calc_env import EXECUTABLE, PATHS, PYTHON

        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if here != PYTHON:
            raise RuntimeError(f"LibreOffice's Python is {here}, the extension was built with Python {PYTHON}: "
                               "build it with a Python of LibreOffice's version")
        for path in PATHS:
            if path not in sys.path:
                sys.path.append(path)
        from xladdin.calc.runtime import CalcFunctions, Waiting
    except Exception as e:  # shown in every cell: the extension cannot reach xladdin
        _problem = f"#QWEN! xladdin cannot be loaded in LibreOffice: {e}"
        return None

    class Volatile(unohelper.Base, XVolatileResult, Waiting):
        pass

    class Callback(unohelper.Base, XCallback):
        def __init__(self, fn):
            self.fn = fn

        def notify(self, data):
            self.fn()

    def event(source, value):
        e = uno.createUnoStruct("com.sun.star.sheet.ResultEvent")
        e.Source, e.Value = source, _any(value)
        return e

    class Closing(unohelper.Base, XTerminateListener):
        def queryTermination(self, event):
            pass

        def notifyTermination(self, event):
            functions.close()  # the engine's private server stops with LibreOffice

        def disposing(self, source):
            pass

    smgr = ctx.getServiceManager()
    main_thread = smgr.createInstanceWithContext("com.sun.star.awt.AsyncCallback", ctx)
    functions = CalcFunctions(lambda: Volatile(event),
                              lambda fn: main_thread.addCallback(Callback(fn), None), python=EXECUTABLE)
    smgr.createInstanceWithContext("com.sun.star.frame.Desktop", ctx).addTerminateListener(Closing())
    _functions = functions
    return _functions


def _any(value):
    if isinstance(value, list):
        return uno.Any("[][]any", tuple(tuple(row) for row in value))
    return value


def _component_class():
    """The add-in's class, made on first use: its interface's type is known to LibreOffice only once
    the extension is registered, so it cannot be imported while the extension is being added."""
    from org.xladdin.calc import XQwenCalc

    class QwenCalc(unohelper.Base, XQwenCalc, XServiceName, XServiceInfo):
        def __init__(self, ctx):
            self.ctx = ctx

        def _call(self, name, *args):
            functions = _load(self.ctx)
            if functions is None:
                return _problem
            return functions.call(name, args)

        def qwenScreen(self, values, header, rules):
            return self._call("QWEN_SCREEN", values, header, rules)

        def qwen(self, prompt, context):
            return self._call("QWEN", prompt, context)

        def qwenExtract(self, text, item, unit):
            return self._call("QWEN_EXTRACT", text, item, unit)

        def qwenClassify(self, text, labels):
            return self._call("QWEN_CLASSIFY", text, labels)

        def qwenHighlights(self, report, points, maxChars):
            return self._call("QWEN_HIGHLIGHTS", report, points, maxChars)

        def qwenStatus(self):
            return self._call("QWEN_STATUS")

        def getServiceName(self):
            return SERVICE

        def getImplementationName(self):
            return IMPLEMENTATION

        def supportsService(self, name):
            return name == SERVICE

        def getSupportedServiceNames(self):
            return (SERVICE,)

    return QwenCalc


def create(ctx):
    return _component_class()(ctx)


g_ImplementationHelper = unohelper.ImplementationHelper()
g_ImplementationHelper.addImplementation(create, IMPLEMENTATION, (SERVICE,))
