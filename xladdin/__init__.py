"""xladdin: a local Qwen model that works like an Excel function."""

from .core.batcher import Batcher  # noqa: E402
from .core.cache import Cache, cache_key  # noqa: E402
from .errors import (  # noqa: E402
    ConfigError,
    EngineError,
    EngineOffline,
    EngineTimeout,
    InputError,
    ModelUnavailable,
    OutputError,
    XladdinError,
)
from .jobs.dataframes import compare, highlights, screen  # noqa: E402
from .settings import Settings  # noqa: E402
from .tasks import ScreenResult, ScreenTask, StockSample  # noqa: E402
from .tasks.rules import DEFAULT_RULES, Flag, RiskLevel, Rules, assess  # noqa: E402
from .version import __version__  # noqa: E402

__all__ = [
    "DEFAULT_RULES",
    "Batcher",
    "Cache",
    "ConfigError",
    "EngineError",
    "EngineOffline",
    "EngineTimeout",
    "Flag",
    "InputError",
    "ModelUnavailable",
    "OutputError",
    "RiskLevel",
    "Rules",
    "ScreenResult",
    "ScreenTask",
    "Settings",
    "StockSample",
    "XladdinError",
    "__version__",
    "assess",
    "cache_key",
    "compare",
    "highlights",
    "screen",
]
