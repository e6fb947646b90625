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
        │   │   └── NameUnresolved the host name (or ansible_host) does not resolve
        │   ├── HostKeyError       the host key is unknown (and not accepted) or changed
        │   ├── AuthError          authentication failed, key file unreadable
        │   ├── CommandTimeout     the command outlived its wall-clock timeout; it was killed
        │   └── Interrupted        the run was interrupted (SIGINT, SIGTERM) while the command ran; it was killed
        ├── ProbeError             the probe ran but crashed, printed no JSON, or reported failed
        │   ├── PackageMissing     the node's Python lacks a package the probes import (torch, nvidia-ml-py)
        │   ├── NvmlUnusable       NVML cannot start beside a driver (version mismatch, permission)
        │   ├── DriverUnresponsive an NVML call did not return within its deadline (the driver is wedged)
        │   ├── DocumentNotKept    the probe ran, its raw document could not be kept in the report folder
        │   ├── ProbeFolderUnwritable the probes' files could not be written into the node's $TMPDIR (full, or not writable)
        │   ├── ReplayNotCaptured  a replayed folder holds no document of the probe for the arguments asked
        │   └── InterpreterMissing the node has no Python where the inventory says
        │       └── InterpreterUnusable what the inventory names runs but is no Python the probes can use
        └── NodeHeld               another gpuaccept run holds the node (its agent's lock)

Every NodeError carries its cause (:attr:`NodeError.cause`, a gpuaccept.causes.Cause): the class and kind are
attributes of the exception's class, so a subclass inherits its parent's; ``evidence`` is what the raiser knew.
"""
from gpuaccept.causes import Cause


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
    """A failure on, or on the way to, one host. ``host`` names it; ``evidence``: JSON-safe facts of the cause
    (gpuaccept.causes); :attr:`cause_class` and :attr:`cause_kind` are the class's."""

    cause_class = "tool"
    cause_kind = "node_error"

    def __init__(self, host: str, msg: str, evidence: dict | None = None):
        super().__init__(f"{host}: {msg}")
        self.host = host
        self.msg = msg
        self.evidence = dict(evidence or {})

    @property
    def cause(self) -> Cause:
        """The cause of this error, filed under its host."""
        return Cause(self.cause_class, self.cause_kind, self.host, evidence=self.evidence)


class TransportError(NodeError):
    """The host could not be reached, or the command could not be started there."""

    cause_class = "connectivity"
    cause_kind = "transport"


class HostUnreachable(TransportError):
    """TCP connect failed, name resolution failed, or the connection dropped."""

    cause_kind = "unreachable"


class NameUnresolved(HostUnreachable):
    """The host's address (``ansible_host`` or its name) does not resolve."""

    cause_kind = "name_unresolved"


class SshRefused(HostUnreachable):
    """Every address of the host answered the TCP connect with a refusal (ECONNREFUSED: RST): the host is up and
    nothing listens on its SSH port, or a firewall rejects it; ``evidence``: ``{"address", "port"}``."""

    cause_kind = "ssh_refused"


class HostKeyError(TransportError):
    """The host's SSH key is not in known_hosts (and new keys are not accepted), or it changed."""

    cause_kind = "host_key"


class AuthError(TransportError):
    """SSH authentication failed or the private key file could not be read."""

    cause_kind = "auth"


class CommandTimeout(TransportError):
    """The command ran past its wall-clock timeout; its process group was killed."""

    cause_class = "tool"
    cause_kind = "timeout"


class ProbeError(NodeError):
    """The probe crashed, printed no JSON document, or reported ``{"failed": true}``."""

    cause_class = "tool"
    cause_kind = "probe_crashed"


class RanksFailed(ProbeError):
    """The ranks of a collective the probe started hung, stalled or died; ``evidence``: the failure document's
    ``ranks_failed`` (``{"outcome", "stage", "ranks"}``, gpuaccept/probes/_supervisor.py ``ranks_failed``).
    Whether that is the collective breaking on the node (a finding) or a probe that never got to run it (an
    error) is the judging's, from the stage (gpuaccept.judging.nccl.collective_broke); as an error it is the
    probe's (tool, rerun)."""


class PackageMissing(ProbeError):
    """The node's Python lacks a package the probes import; ``evidence``: ``{"package", "python"[,
    "driver_present"]}``."""

    cause_class = "configuration"
    cause_kind = "package_missing"


class ProgramMissing(ProbeError):
    """A program a probe runs is not on the node's PATH (fio); ``evidence``: ``{"program"}``. The node's software,
    not its hardware, and no rerun brings it."""

    cause_class = "configuration"
    cause_kind = "program_missing"


class NodeSetup(ProbeError):
    """A probe recognised a state of the node's software or settings that keeps it from measuring (its failure
    document's ``setup``: a driver older than torch's CUDA build, an unreadable kernel log, a library that fails
    while it loads); ``evidence``: ``{"setup"}``, which is also the cause's kind (a row of
    gpuaccept/data/actions.yaml). Configuration: a rerun does not change it."""

    cause_class = "configuration"

    @property
    def cause_kind(self) -> str:  # type: ignore[override]
        return str((self.evidence or {}).get("setup") or "node_setup")


class DocumentNotKept(ProbeError):
    """A probe's raw document could not be written into the report folder (a symlinked or full folder);
    ``evidence``: ``{"path", "why"}``. The controller's fault, not the node's."""

    cause_kind = "document_not_kept"


class NvmlUnusable(ProbeError):
    """NVML cannot start on a node with an NVIDIA driver (library/module mismatch, no permission, init failure);
    ``evidence``: ``{"reason_code", "nvml_library_version", "kernel_driver_version"}``."""

    cause_class = "configuration"
    cause_kind = "nvml_unusable"


class DriverUnresponsive(ProbeError):
    """An NVML call on the node did not return within its deadline (gpuaccept/probes/_deadline.py): the driver is
    wedged; ``evidence``: ``{"gpu", "call", "seconds", "state", "unkillable"}``."""

    cause_class = "hardware"
    cause_kind = "driver_unresponsive"


class ProbeFolderUnwritable(ProbeError):
    """The probes' files could not be written into the agent's folder on the node (``$TMPDIR/gpuaccept.<hex>``);
    ``evidence``: ``{"folder", "full"[, "errno"]}``. ``full`` (the filesystem out of space or the user out of
    quota: ENOSPC, EDQUOT) is capacity, kind ``probe_folder_full``; anything else (read-only, a file size limit,
    permissions) is configuration, kind ``probe_folder_unwritable``. The node's disk, not its GPUs."""

    @property
    def cause_class(self) -> str:  # type: ignore[override]
        return "capacity" if self.evidence.get("full") else "configuration"

    @property
    def cause_kind(self) -> str:  # type: ignore[override]
        return "probe_folder_full" if self.evidence.get("full") else "probe_folder_unwritable"


class ReplayNotCaptured(ProbeError):
    """A replayed host's folder holds no saved document of a probe for the arguments this run asks (the run's
    selection or the host's variables differ from the captured run's); ``evidence``: ``{"probe", "folder"}``.
    Configuration: nothing ran, and a rerun asks the same."""

    cause_class = "configuration"
    cause_kind = "replay_not_captured"


class InterpreterMissing(ProbeError):
    """The node has no Python at ``ansible_python_interpreter`` (or no ``python3``)."""

    cause_class = "configuration"
    cause_kind = "interpreter_missing"


class InterpreterUnusable(InterpreterMissing):
    """``ansible_python_interpreter`` names something that runs but is not a Python the probes can use: a
    program that is not Python (it never ran the agent's first line), a directory or a file without execute
    permission (the shell's rc 126), or a Python older than the probes need (gpuaccept.runner.agent
    ``NODE_PYTHON_MIN``); ``evidence``: ``{"python", "rc", "version"}`` (``version`` what it said it is, None when
    it said nothing)."""

    cause_kind = "interpreter_unusable"


class NodeHeld(NodeError):
    """Another gpuaccept run holds the node (the agent's lock): nothing of this run touched its GPUs or disks.
    ``evidence``: ``{"run_id", "controller", "since", "pid"}`` of the holder."""

    cause_class = "contention"
    cause_kind = "held"


class Interrupted(TransportError):
    """The run was interrupted (SIGINT/SIGTERM) while a command ran on the host, or before it could start;
    its remote process group was killed. ``str()`` is ``interrupted (SIGINT) while running on <host>...``."""

    cause_class = "interruption"
    cause_kind = "interrupted"

    def __init__(self, host: str, msg: str, evidence: dict | None = None):
        super().__init__(host, msg, evidence)
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
