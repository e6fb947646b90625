"""Errors raised by gpuaccept.

The tree::

    GpuacceptError                 any error of ours; its str() is one line meant for an operator
    ├── ConfigError                the operator's input is wrong; the run stops before touching a node
    │   ├── InventoryError         inventory file unreadable or malformed (message names file:line)
    │   ├── PatternError           a --limit pattern is malformed or matches no host
    │   └── ThresholdError         a threshold file is malformed, has an unknown key, or a SKU is unknown
    └── NodeError                  something went wrong on or on the way to one host (JUnit <error>)
        ├── TransportError         the host could not be reached or the command could not be run
        │   ├── HostUnreachable    TCP connect failed, DNS failed, connection dropped
        │   ├── HostKeyError       the host key is unknown (and not accepted) or changed
        │   ├── AuthError          authentication failed, key file unreadable
        │   ├── CommandTimeout     the command outlived its wall-clock timeout; it was killed
        │   └── Interrupted        the run was interrupted (SIGINT, SIGTERM) while the command ran; it was killed
        └── ProbeError             the probe ran but crashed, printed no JSON, or reported failed
"""


class GpuacceptError(Exception):
    """Base of every gpuaccept error. ``str(err)`` is a single line for the operator."""


class ConfigError(GpuacceptError):
    """The operator's input (inventory, pattern, thresholds, options) is wrong."""


class InventoryError(ConfigError):
    """An inventory file is missing, unreadable or malformed; the message names file:line."""


class PatternError(ConfigError):
    """A host pattern (``--limit``) is malformed or selects no host."""


class ThresholdError(ConfigError):
    """A threshold file is malformed or has an unknown key, or a SKU has no threshold file."""


class NodeError(GpuacceptError):
    """A failure on, or on the way to, one host. ``host`` names it."""

    def __init__(self, host: str, msg: str):
        super().__init__(f"{host}: {msg}")
        self.host = host
        self.msg = msg


class TransportError(NodeError):
    """The host could not be reached, or the command could not be started there."""


class HostUnreachable(TransportError):
    """TCP connect failed, name resolution failed, or the connection dropped."""


class HostKeyError(TransportError):
    """The host's SSH key is not in known_hosts (and new keys are not accepted), or it changed."""


class AuthError(TransportError):
    """SSH authentication failed or the private key file could not be read."""


class CommandTimeout(TransportError):
    """The command ran past its wall-clock timeout; its process group was killed."""


class ProbeError(NodeError):
    """The probe crashed, printed no JSON document, or reported ``{"failed": true}``."""


class Interrupted(TransportError):
    """The run was interrupted (SIGINT/SIGTERM) while a command ran on the host, or before it could start;
    its remote process group was killed. ``str()`` is ``interrupted (SIGINT) while running on <host>...``."""

    def __init__(self, host: str, msg: str):
        super().__init__(host, msg)
        self.args = (msg,)

    def __str__(self) -> str:
        return self.msg


#: user_properties key marking a failed report as one of gpuaccept's errors (unreachable host, crashed probe,
#: timeout, blocked, measurement gap, interrupted): counted as an error, not a failure, everywhere
ERROR_KEY = "gpuaccept.error"
#: user_properties key naming the kind of such an error: the exception's class name (``HostUnreachable``,
#: ``CommandTimeout``, ``Interrupted``, ``ProbeError``...) or ``"internal"``; it picks the error's action
#: (gpuaccept.judging.actions.for_error)
ERROR_KIND_KEY = "gpuaccept.error_kind"
