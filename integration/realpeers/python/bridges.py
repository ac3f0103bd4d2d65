"""Bridges the three gaps between the E2B Python SDK 2.24.0 source tree and
Debian's Python packages, so that the SDK runs unchanged from its source
(the real-peer tier, integration/realpeers). Import it before `e2b`.

1. The SDK reads its own version with importlib.metadata.version("e2b"),
   which needs an installed distribution; a source tree has none. A
   dist-info directory naming e2b 2.24.0 is written to a temporary
   directory that is put on sys.path.
2. Debian's httpx (0.23) has no httpx._types.ProxyTypes, which the SDK
   imports for type annotations only. The name is added, with the shape
   later httpx gives it (a URL, a string or a Proxy).
3. dockerfile_parse is not packaged by Debian; the SDK imports it only to
   build templates from a Dockerfile, which these tests never do. A module
   of that name whose DockerfileParser raises when used stands in for it.
"""

import atexit
import os
import shutil
import sys
import tempfile
import types
import typing

E2B_VERSION = "2.24.0"

_dist = tempfile.mkdtemp(prefix="sandgate-e2b-dist-")
atexit.register(shutil.rmtree, _dist, True)
_info = os.path.join(_dist, "e2b-%s.dist-info" % E2B_VERSION)
os.mkdir(_info)
with open(os.path.join(_info, "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: e2b\nVersion: %s\n" % E2B_VERSION)
sys.path.append(_dist)

import httpx  # noqa: E402
import httpx._types  # noqa: E402

if not hasattr(httpx._types, "ProxyTypes"):
    httpx._types.ProxyTypes = typing.Union[httpx.URL, str, "httpx.Proxy"]

if "dockerfile_parse" not in sys.modules:
    try:
        import dockerfile_parse  # noqa: F401
    except ImportError:
        _stub = types.ModuleType("dockerfile_parse")

        class DockerfileParser:  # noqa: D101
            def __init__(self, *args, **kwargs):
                raise NotImplementedError(
                    "dockerfile_parse is not installed (sandgate's test bridge): template builds are not supported here"
                )

        _stub.DockerfileParser = DockerfileParser
        sys.modules["dockerfile_parse"] = _stub
