"""Every environment variable imagegen reads: one table, and docs/imagegen.md's from it.

Data only, like ``op_builder.settings`` (whose ``Setting`` it shares): readers refer to these
names instead of string literals and take the environment as a ``Mapping``. ``IMAGEGEN_<X>``
stands in for the flag ``--x`` of ``dockerfile`` / ``build`` (flag > variable > catalog): those
come from the options table (``imagegen.options``), where each option is declared; the rest
are imagegen's own. The DS_* variables imagegen
writes into images are op_builder's (``op_builder.settings``). ``PATH`` and ``HOME`` are
read only to find tools and the home folder, and are left out.
"""

from __future__ import annotations

from imagegen import options
from imagegen.options import ENV_PREFIX as ENV_PREFIX
from op_builder.settings import Setting

DEBUG = Setting(ENV_PREFIX + "DEBUG", "flag", "unset", "`1`: show a traceback with errors", "imagegen")
INSECURE_REGISTRIES = Setting(
    ENV_PREFIX + "INSECURE_REGISTRIES",
    "list",
    "unset",
    "registries (`host:port`, comma-separated) spoken to over plain HTTP when pushing the proof and "
    "indexes (the loopback always is)",
    "imagegen",
)
STANDIN_PREFIX = Setting(
    "STANDIN_PREFIX", "text", "`imagegen-standin`", "the stand-in images' repository prefix", "imagegen"
)
STANDIN_MIRROR = Setting(
    "STANDIN_MIRROR",
    "text",
    "the host's apt sources",
    "the Debian mirror the stand-ins are built from",
    "imagegen",
)
STANDIN_SECURITY_MIRROR = Setting(
    "STANDIN_SECURITY_MIRROR",
    "text",
    "the host's apt sources",
    "the Debian security mirror, likewise",
    "imagegen",
)
STANDIN_CA = Setting(
    "STANDIN_CA",
    "path",
    "the host's bundle, if any",
    "a CA bundle apt trusts while building the stand-ins",
    "imagegen",
)
STANDIN_PYTHON = Setting(
    "STANDIN_PYTHON",
    "command",
    "the checkout's `.venv`, else this Python",
    "the Python whose pip fetches the CUDA wheels",
    "imagegen",
)
DOCKER_HOST = Setting(
    "DOCKER_HOST", "text", "the local socket", "the container engine, as in Docker", "toolkit"
)
DOCKER_CONFIG = Setting(
    "DOCKER_CONFIG",
    "path",
    "`~/.docker`",
    "docker's client configuration: the credentials `docker login` stored, used to push the proof",
    "toolkit",
)
DOCKER_TLS_VERIFY = Setting(
    "DOCKER_TLS_VERIFY", "flag", "unset", "TLS to `DOCKER_HOST`, as in Docker", "toolkit"
)
DOCKER_BUILDKIT = Setting(
    "DOCKER_BUILDKIT", "flag", "unset", "`0`: use the classic builder, as in Docker", "toolkit"
)
CI = Setting(
    "CI", "flag", "unset", "`1`/`true`: plain progress output, as on a terminal that is not one", "toolkit"
)
XDG_CACHE_HOME = Setting(
    "XDG_CACHE_HOME", "path", "`~/.cache`", "where downloads and compile checks are cached", "toolkit"
)
CUDA_HOME = Setting(
    "CUDA_HOME",
    "path",
    "`/usr/local/cuda`",
    "the CUDA toolkit `make compat` and the stand-ins use",
    "toolkit",
)
REQUESTS_CA_BUNDLE = Setting(
    "REQUESTS_CA_BUNDLE",
    "path",
    "pip's",
    "CA bundle for downloads (then `PIP_CERT`, `SSL_CERT_FILE`)",
    "toolkit",
)
PIP_CERT = Setting("PIP_CERT", "path", "pip's", "CA bundle for downloads, as pip reads it", "toolkit")
SSL_CERT_FILE = Setting(
    "SSL_CERT_FILE", "path", "pip's", "CA bundle for downloads, as OpenSSL reads it", "toolkit"
)

# The IMAGEGEN_* variable of each image option, from the options table (imagegen.options).
OPTIONS: tuple[Setting, ...] = options.env_settings()


def _cache_credential(name: str, meaning: str) -> Setting:
    return Setting(name, "text", "unset", meaning + " (sent to the build as a BuildKit secret)", "toolkit")


# What sccache reads its backend's credentials and connection details from. With
# --compile-cache these go from imagegen's environment into the build's secret, never into a
# build argument or a layer (imagegen/imagespec/compile_cache.py).
GOOGLE_APPLICATION_CREDENTIALS = _cache_credential(
    "GOOGLE_APPLICATION_CREDENTIALS", "a GCS compile cache's service account key file"
)
COMPILE_CACHE_CREDENTIALS: tuple[Setting, ...] = (
    _cache_credential("SCCACHE_REDIS_USERNAME", "a Redis compile cache's user"),
    _cache_credential("SCCACHE_REDIS_PASSWORD", "a Redis compile cache's password"),
    _cache_credential("AWS_ACCESS_KEY_ID", "an S3 compile cache's access key"),
    _cache_credential("AWS_SECRET_ACCESS_KEY", "an S3 compile cache's secret key"),
    _cache_credential("AWS_SESSION_TOKEN", "an S3 compile cache's session token"),
    _cache_credential("AWS_REGION", "an S3 compile cache's region"),
    _cache_credential("SCCACHE_REGION", "an S3 compile cache's region, as sccache names it"),
    _cache_credential("SCCACHE_ENDPOINT", "an S3-compatible compile cache's endpoint"),
    GOOGLE_APPLICATION_CREDENTIALS,
)

SETTINGS: tuple[Setting, ...] = (
    *OPTIONS,
    DEBUG,
    INSECURE_REGISTRIES,
    STANDIN_PREFIX,
    STANDIN_MIRROR,
    STANDIN_SECURITY_MIRROR,
    STANDIN_CA,
    STANDIN_PYTHON,
    DOCKER_HOST,
    DOCKER_CONFIG,
    DOCKER_TLS_VERIFY,
    DOCKER_BUILDKIT,
    CI,
    XDG_CACHE_HOME,
    CUDA_HOME,
    REQUESTS_CA_BUNDLE,
    PIP_CERT,
    SSL_CERT_FILE,
    *COMPILE_CACHE_CREDENTIALS,
)
CA_BUNDLES: tuple[Setting, ...] = (REQUESTS_CA_BUNDLE, PIP_CERT, SSL_CERT_FILE)


def markdown_table(settings: tuple[Setting, ...] = SETTINGS) -> str:
    """docs/imagegen.md's table of variables, one row per setting."""
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.kind} | {s.default} | {s.meaning} |" for s in settings]
    return "\n".join(rows) + "\n"
