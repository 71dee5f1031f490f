"""OrbitKV P/D for engines in Python: the client of the transfer worker's local engine API (docs/engine-api.md).

Standard library only, Python 3.10 or newer.
"""

from .client import EngineApiClient, KvSignal, LeaseKeeper, now_us
from .protocol import (ApiError, CudaIpcPool, CudaIpcRegion, Decision, Layout, Registration, ShmPool)

__all__ = ["EngineApiClient", "KvSignal", "LeaseKeeper", "now_us", "ApiError", "CudaIpcPool", "CudaIpcRegion", "Decision",
           "Layout", "Registration", "ShmPool"]
__version__ = "0.1.0"
